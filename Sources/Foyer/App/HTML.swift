import NIOCore

/// Text into HTML, the same five characters mustache escapes. Works on UTF-8 bytes: walking Characters
/// (grapheme clusters) cost more than the rest of a cached page.
enum HTML {
    static func escape(_ text: some StringProtocol) -> String {
        var buffer = ByteBuffer()
        write(text, escapedInto: &buffer)
        return String(buffer: buffer)
    }

    static func write(_ text: some StringProtocol, escapedInto buffer: inout ByteBuffer) {
        let utf8 = text.utf8
        guard utf8.contains(where: needsEscape) else {
            buffer.writeString(String(text))
            return
        }
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "&"): buffer.writeStaticString("&amp;")
            case UInt8(ascii: "<"): buffer.writeStaticString("&lt;")
            case UInt8(ascii: ">"): buffer.writeStaticString("&gt;")
            case UInt8(ascii: "\""): buffer.writeStaticString("&quot;")
            case UInt8(ascii: "'"): buffer.writeStaticString("&#39;")
            default: buffer.writeInteger(byte)
            }
        }
    }

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "&") || byte == UInt8(ascii: "<") || byte == UInt8(ascii: ">")
            || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'")
    }
}
