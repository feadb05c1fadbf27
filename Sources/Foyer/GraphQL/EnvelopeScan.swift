import NIOCore

/// What admission reads of a POST body (`query`, `operationName`, and that `variables` is an object), found in one
/// pass over its bytes: Foundation's JSONDecoder was a tenth of what an uncached query costs beyond a cached one.
/// Strict JSON (RFC 8259) throughout; anything it does not settle (invalid JSON, a key twice, `extensions`, a
/// string that is not valid UTF-8, nesting past 256) is left to JSONDecoder, so what is accepted or refused is what
/// JSONDecoder says.
enum EnvelopeScan {
    static func envelope(of body: ByteBuffer) -> GraphQLController.Envelope? {
        body.withUnsafeReadableBytes { bytes in
            var scanner = Scanner(bytes: bytes)
            return scanner.envelope()
        }
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var at = 0
        static let maximumDepth = 256

        init(bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        mutating func envelope() -> GraphQLController.Envelope? {
            skipWhitespace()
            guard take(UInt8(ascii: "{")) else { return nil }
            var query: String?
            var operationName: String?
            var seen: [String] = []
            skipWhitespace()
            if !take(UInt8(ascii: "}")) {
                repeat {
                    skipWhitespace()
                    guard let key = string() else { return nil }
                    skipWhitespace()
                    guard take(UInt8(ascii: ":")) else { return nil }
                    skipWhitespace()
                    switch key {
                    case "query", "operationName", "variables", "extensions":
                        guard !seen.contains(key) else { return nil }
                        seen.append(key)
                        if key == "extensions" {
                            // Persisted queries are JSONDecoder's to read; a null is no extensions at all.
                            guard literal("null") else { return nil }
                        } else if key == "variables" {
                            guard literal("null") || (peek == UInt8(ascii: "{") && skipValue(depth: 0)) else { return nil }
                        } else {
                            let value: String?
                            if literal("null") {
                                value = nil
                            } else {
                                guard let text = string() else { return nil }
                                value = text
                            }
                            if key == "query" { query = value } else { operationName = value }
                        }
                    default:
                        guard skipValue(depth: 0) else { return nil }
                    }
                    skipWhitespace()
                } while take(UInt8(ascii: ","))
                guard take(UInt8(ascii: "}")) else { return nil }
            }
            skipWhitespace()
            guard at == bytes.count else { return nil }
            return GraphQLController.Envelope(query: query, operationName: operationName, persistedQuery: nil)
        }

        private var peek: UInt8? { at < bytes.count ? bytes[at] : nil }

        private mutating func take(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            at += 1
            return true
        }

        private mutating func skipWhitespace() {
            while let byte = peek, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { at += 1 }
        }

        private mutating func literal(_ word: StaticString) -> Bool {
            let length = word.utf8CodeUnitCount
            guard bytes.count - at >= length else { return false }
            for offset in 0..<length where bytes[at + offset] != word.utf8Start[offset] { return false }
            at += length
            return true
        }

        private mutating func skipValue(depth: Int) -> Bool {
            guard depth < Self.maximumDepth, let byte = peek else { return false }
            switch byte {
            case UInt8(ascii: "\""):
                return string() != nil
            case UInt8(ascii: "{"):
                at += 1
                skipWhitespace()
                if take(UInt8(ascii: "}")) { return true }
                repeat {
                    skipWhitespace()
                    guard string() != nil else { return false }
                    skipWhitespace()
                    guard take(UInt8(ascii: ":")) else { return false }
                    skipWhitespace()
                    guard skipValue(depth: depth + 1) else { return false }
                    skipWhitespace()
                } while take(UInt8(ascii: ","))
                return take(UInt8(ascii: "}"))
            case UInt8(ascii: "["):
                at += 1
                skipWhitespace()
                if take(UInt8(ascii: "]")) { return true }
                repeat {
                    skipWhitespace()
                    guard skipValue(depth: depth + 1) else { return false }
                    skipWhitespace()
                } while take(UInt8(ascii: ","))
                return take(UInt8(ascii: "]"))
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            default: return number()
            }
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
        private mutating func number() -> Bool {
            _ = take(UInt8(ascii: "-"))
            if take(UInt8(ascii: "0")) {
                if let byte = peek, isDigit(byte) { return false }
            } else {
                guard digits() else { return false }
            }
            if take(UInt8(ascii: ".")) { guard digits() else { return false } }
            if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
                if !take(UInt8(ascii: "+")) { _ = take(UInt8(ascii: "-")) }
                guard digits() else { return false }
            }
            return true
        }

        private mutating func digits() -> Bool {
            let start = at
            while let byte = peek, isDigit(byte) { at += 1 }
            return at > start
        }

        private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        /// A string's text; nil when it is not a valid JSON string of valid UTF-8.
        private mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = at
            var escaped = false
            while true {
                guard let byte = peek, byte >= 0x20 else { return nil }
                if byte == UInt8(ascii: "\"") { break }
                if byte == UInt8(ascii: "\\") {
                    escaped = true
                    at += 2
                } else {
                    at += 1
                }
            }
            let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<at])
            at += 1
            return escaped ? Self.unescaped(raw) : String(validating: raw, as: UTF8.self)
        }

        private static func unescaped(_ raw: UnsafeRawBufferPointer) -> String? {
            var text: [UInt8] = []
            text.reserveCapacity(raw.count)
            var index = 0
            while index < raw.count {
                let byte = raw[index]
                index += 1
                guard byte == UInt8(ascii: "\\") else {
                    text.append(byte)
                    continue
                }
                guard index < raw.count else { return nil }
                let escape = raw[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escape)
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                case UInt8(ascii: "u"):
                    guard let unit = hex(raw, &index) else { return nil }
                    var value = UInt32(unit)
                    if (0xD800...0xDBFF).contains(unit) {
                        // A high surrogate must be followed by an escaped low one.
                        guard raw.count - index >= 6, raw[index] == UInt8(ascii: "\\"), raw[index + 1] == UInt8(ascii: "u") else { return nil }
                        index += 2
                        guard let low = hex(raw, &index), (0xDC00...0xDFFF).contains(low) else { return nil }
                        value = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(unit) {
                        return nil
                    }
                    guard let scalar = Unicode.Scalar(value) else { return nil }
                    text.append(contentsOf: String(Character(scalar)).utf8)
                default:
                    return nil
                }
            }
            return String(validating: text, as: UTF8.self)
        }

        private static func hex(_ raw: UnsafeRawBufferPointer, _ index: inout Int) -> UInt16? {
            guard raw.count - index >= 4 else { return nil }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = raw[index]
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt16(digit)
            }
            return value
        }
    }
}
