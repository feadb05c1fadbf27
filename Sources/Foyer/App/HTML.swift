import Mustache
import NIOCore

/// Text into HTML, the same five characters mustache escapes. Works on UTF-8 bytes: walking Characters
/// (grapheme clusters) cost more than the rest of a cached page.
enum HTML {
    static func escape(_ text: some StringProtocol) -> String {
        // Most values have nothing to escape: the same string, not a copy.
        guard text.utf8.contains(where: needsEscape) else { return String(text) }
        var buffer = ByteBuffer()
        buffer.reserveCapacity(text.utf8.count + 16)
        writeEscaping(text.utf8, into: &buffer)
        return String(buffer: buffer)
    }

    static func write(_ text: some StringProtocol, escapedInto buffer: inout ByteBuffer) {
        guard text.utf8.contains(where: needsEscape) else {
            buffer.writeString(String(text))
            return
        }
        writeEscaping(text.utf8, into: &buffer)
    }

    /// Byte by byte: for text already seen to need it.
    private static func writeEscaping(_ utf8: some Sequence<UInt8>, into buffer: inout ByteBuffer) {
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

/// Mustache's `{{name}}` escaped by `HTML.escape` rather than by mustache's own escaping, which walks Characters and
/// looks each up in a dictionary: 6 % of a task list's CPU. Each template, a partial too, starts out in mustache's
/// own, so `Views` starts every template with `pragma`. The same five characters are escaped; the one difference is
/// a `<` that a combining mark follows, which mustache leaves as it is and this escapes.
struct HTMLEscapedByBytes: MustacheContentType {
    static let pragma: String = {
        MustacheContentTypes.register(HTMLEscapedByBytes(), named: "FOYER_HTML")
        return "{{% CONTENT_TYPE: FOYER_HTML }}"
    }()

    func escapeText(_ text: String) -> String {
        HTML.escape(text)
    }
}
