#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Hummingbird
import NIOCore

/// A `multipart/form-data` body (RFC 7578), as browsers send a form with a file and native clients an upload:
/// text fields, and files by field name. Files are slices of the body, not copies.
struct MultipartForm: Sendable {
    struct File: Sendable {
        /// As the client named it: shown back, never trusted (what a file is comes from its bytes).
        let filename: String
        let bytes: ByteBuffer
    }

    var fields: [String: String] = [:]
    var files: [String: File] = [:]

    init(fields: [String: String] = [:], files: [String: File] = [:]) {
        (self.fields, self.files) = (fields, files)
    }

    static let maximumParts = 100
    static let maximumPartHeadBytes = 8 * 1024

    /// The boundary a `Content-Type: multipart/form-data; boundary=…` names, or nil for any other type.
    static func boundary(contentType: String) -> String? {
        let parameters = contentType.split(separator: ";")
        guard parameters.first?.trimmingEnds(where: \.isWhitespace).lowercased() == "multipart/form-data" else { return nil }
        for parameter in parameters.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingEnds(where: \.isWhitespace).lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingEnds(where: \.isWhitespace)
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
            // RFC 2046: 1 to 70 characters.
            return (1...70).contains(value.utf8.count) ? String(value) : nil
        }
        return nil
    }

    /// Later fields of one name win, as with urlencoded forms. A malformed body is a `400` saying what is wrong.
    init(parsing body: ByteBuffer, boundary: String) throws {
        let delimiter = Array("--\(boundary)".utf8)
        let bytes = body.readableBytesView
        // The first delimiter may follow a preamble; each later one follows a CRLF.
        guard var position = Self.find(delimiter, in: body, from: 0) else {
            throw Self.malformed("it has no part delimited by its boundary")
        }
        var parts = 0
        while true {
            position += delimiter.count
            if Self.matches([0x2D, 0x2D], in: bytes, at: position) { return }  // "--": the last delimiter
            // Transport padding (spaces or tabs) may follow a delimiter before its CRLF.
            while position < bytes.count, bytes[bytes.startIndex + position] == 0x20 || bytes[bytes.startIndex + position] == 0x09 { position += 1 }
            guard Self.matches([0x0D, 0x0A], in: bytes, at: position) else { throw Self.malformed("a boundary is not followed by a line break") }
            position += 2
            parts += 1
            guard parts <= Self.maximumParts else { throw Self.malformed("it has more than \(Self.maximumParts) parts") }
            guard !Self.matches([0x0D, 0x0A], in: bytes, at: position) else {
                throw Self.malformed("a part has no Content-Disposition: form-data with a name")
            }
            guard let headEnd = Self.find([0x0D, 0x0A, 0x0D, 0x0A], in: body, from: position, within: Self.maximumPartHeadBytes) else {
                throw Self.malformed("a part's headers do not end (or are over \(Self.maximumPartHeadBytes / 1024) KiB)")
            }
            let head = String(decoding: bytes[(bytes.startIndex + position)..<(bytes.startIndex + headEnd)], as: UTF8.self)
            let contentStart = headEnd + 4
            guard let next = Self.find([0x0D, 0x0A] + delimiter, in: body, from: contentStart - 2) else {
                throw Self.malformed("its last part is not closed by the boundary (the upload may have been cut short)")
            }
            let content = body.getSlice(at: body.readerIndex + contentStart, length: max(0, next - contentStart)) ?? ByteBuffer()
            try add(head: head, content: content)
            position = next + 2
        }
    }

    private mutating func add(head: String, content: ByteBuffer) throws {
        var disposition: [String: String]?
        for line in head.split(separator: "\r\n") {
            let pair = line.split(separator: ":", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingEnds(where: \.isWhitespace).lowercased() == "content-disposition" else { continue }
            disposition = Self.parameters(of: pair[1])
        }
        guard let disposition, let name = disposition["name"] else {
            throw Self.malformed("a part has no Content-Disposition: form-data with a name")
        }
        if let filename = disposition["filename"] {
            files[name] = File(filename: filename, bytes: content)
        } else {
            fields[name] = String(buffer: content)
        }
    }

    /// `form-data; name="title"; filename="a.jpg"` → ["name": "title", "filename": "a.jpg"]. Browsers write a quote
    /// inside a value as `%22` and a line break as `%0D%0A` (WHATWG HTML), and those stay as sent.
    static func parameters(of value: Substring) -> [String: String] {
        var result: [String: String] = [:]
        var rest = value[...]
        guard let first = rest.firstIndex(of: ";") else { return result }
        rest = rest[rest.index(after: first)...]
        while !rest.isEmpty {
            rest = rest.drop(while: { $0 == " " || $0 == "\t" || $0 == ";" })
            guard let equals = rest.firstIndex(of: "=") else { break }
            let key = rest[..<equals].trimmingEnds(where: \.isWhitespace).lowercased()
            rest = rest[rest.index(after: equals)...]
            var parsed = ""
            if rest.first == "\"" {
                rest = rest.dropFirst()
                while let character = rest.first, character != "\"" {
                    if character == "\\", rest.count > 1 {
                        rest = rest.dropFirst()
                    }
                    parsed.append(rest.first!)
                    rest = rest.dropFirst()
                }
                rest = rest.dropFirst()
                rest = rest.drop(while: { $0 != ";" })
            } else {
                let end = rest.firstIndex(of: ";") ?? rest.endIndex
                parsed = String(rest[..<end].trimmingEnds(where: \.isWhitespace))
                rest = rest[end...]
            }
            result[key] = parsed
        }
        return result
    }

    private static func malformed(_ why: String) -> AppError {
        AppError(.badRequest, message: Phrase("errors.multipart", ["why": why]))
    }

    private static func matches(_ needle: [UInt8], in bytes: ByteBufferView, at offset: Int) -> Bool {
        guard offset >= 0, offset + needle.count <= bytes.count else { return false }
        return zip(bytes[(bytes.startIndex + offset)...], needle).allSatisfy { $0 == $1 }
    }

    /// The offset of `needle` at or after `start`, looking no further than `within` bytes past `start`.
    private static func find(_ needle: [UInt8], in body: ByteBuffer, from start: Int, within: Int = .max) -> Int? {
        guard start >= 0, start <= body.readableBytes else { return nil }
        return body.withUnsafeReadableBytes { buffer -> Int? in
            let length = min(buffer.count - start, within == .max ? .max : within + needle.count)
            guard length >= needle.count, let base = buffer.baseAddress else { return nil }
            // memchr for the first byte, memcmp for the rest: a 20 MB upload is searched at memory speed.
            var offset = start
            let end = start + length - needle.count
            while offset <= end {
                guard let hit = memchr(base + offset, Int32(needle[0]), end - offset + 1) else { return nil }
                let at = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(base + at, needle, needle.count) == 0 { return at }
                offset = at + 1
            }
            return nil
        }
    }
}
