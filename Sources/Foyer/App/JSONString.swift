import Foundation
import NIOCore

/// Text as a JSON string, appended to JSON written by hand where an encoder costs too much: every log line, the
/// words each language's pages carry for scripts.
enum JSONString {
    /// `escapingLessThan`: `<` too is escaped (`\u003c`), so the JSON can sit inside a `<script>` element.
    static func append(_ text: String, to json: inout String, escapingLessThan: Bool = false) {
        json += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": json += "\\\""
            case "\\": json += "\\\\"
            case "\n": json += "\\n"
            case "\r": json += "\\r"
            case "\t": json += "\\t"
            case "<" where escapingLessThan: json += "\\u003c"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                json += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: json.unicodeScalars.append(scalar)
            }
        }
        json += "\""
    }
}

/// A JSON object written by hand, for an answer whose encoding cost more than the rest of its route (`GET
/// /api/v1/me`: `JSONEncoder` was a tenth of its CPU). Keys go in ascending order, as the API's encoder sorts them,
/// so the bytes are those `JSONEncoder` would write; a key out of order stops a debug build.
struct JSONObjectText {
    private var text = "{"
    private var lastKey = ""

    private mutating func key(_ key: String) {
        assert(lastKey.isEmpty || lastKey < key, "\(key) after \(lastKey): the API's JSON sorts its keys")
        if !lastKey.isEmpty { text += "," }
        lastKey = key
        JSONString.append(key, to: &text)
        text += ":"
    }

    mutating func add(_ name: String, _ value: String?) {
        key(name)
        if let value { JSONString.append(value, to: &text) } else { text += "null" }
    }

    mutating func add(_ name: String, _ value: Int64) {
        key(name)
        text += String(value)
    }

    mutating func add(_ name: String, _ value: Bool) {
        key(name)
        text += value ? "true" : "false"
    }

    /// As the API's encoder writes a date (`.iso8601`): UTC to the second, `2026-11-28T12:00:00Z`.
    mutating func add(_ name: String, _ value: Date?) {
        key(name)
        guard let value else {
            text += "null"
            return
        }
        text += "\""
        text += Self.iso8601(value)
        text += "\""
    }

    static func iso8601(_ date: Date) -> String {
        var whole = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&whole, &parts)
        func digits(_ value: Int32, _ count: Int) -> String {
            let text = String(value)
            return text.count < count ? String(repeating: "0", count: count - text.count) + text : text
        }
        return digits(parts.tm_year + 1900, 4) + "-" + digits(parts.tm_mon + 1, 2) + "-" + digits(parts.tm_mday, 2) + "T"
            + digits(parts.tm_hour, 2) + ":" + digits(parts.tm_min, 2) + ":" + digits(parts.tm_sec, 2) + "Z"
    }

    var buffer: ByteBuffer { ByteBuffer(string: text + "}") }
}
