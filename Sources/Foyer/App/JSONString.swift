import Foundation
import NIOCore

/// Text as a JSON string, appended to JSON written by hand where an encoder costs too much: every log line, the
/// words each language's pages carry for scripts.
enum JSONString {
    /// `escapingLessThan`: `<` too is escaped (`\u003c`), so the JSON can sit inside a `<script>` element.
    static func append(_ text: String, to json: inout String, escapingLessThan: Bool = false) {
        json += "\""
        // Most text needs no escape: then it goes in whole, not scalar by scalar.
        guard text.utf8.contains(where: { needsEscape($0, escapingLessThan: escapingLessThan) }) else {
            json += text
            json += "\""
            return
        }
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

    /// The same, written into `buffer`: runs that need no escape are copied as they are.
    static func write(_ text: String, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            for (index, byte) in bytes.enumerated() where needsEscape(byte, escapingLessThan: false) {
                buffer.writeBytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[start..<index]))
                switch byte {
                case UInt8(ascii: "\""): buffer.writeStaticString("\\\"")
                case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
                case UInt8(ascii: "\n"): buffer.writeStaticString("\\n")
                case UInt8(ascii: "\r"): buffer.writeStaticString("\\r")
                case UInt8(ascii: "\t"): buffer.writeStaticString("\\t")
                // As JSONEncoder writes these two.
                case 0x08: buffer.writeStaticString("\\b")
                case 0x0C: buffer.writeStaticString("\\f")
                default:
                    buffer.writeStaticString("\\u00")
                    buffer.writeInteger(hexDigit(byte >> 4))
                    buffer.writeInteger(hexDigit(byte & 0xF))
                }
                start = index + 1
            }
            buffer.writeBytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[start...]))
        }
        buffer.writeInteger(UInt8(ascii: "\""))
    }

    /// Every byte a JSON string escapes is ASCII, so bytes of a multi-byte character never are.
    private static func needsEscape(_ byte: UInt8, escapingLessThan: Bool) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || (escapingLessThan && byte == UInt8(ascii: "<"))
    }

    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }
}

/// A JSON object written by hand, for an answer whose encoding cost more than the rest of its route (`GET
/// /api/v1/me`: `JSONEncoder` was a tenth of its CPU). Keys go in ascending order, as the API's encoder sorts them,
/// so the bytes are those `JSONEncoder` would write; a key out of order stops a debug build.
struct JSONObjectText {
    private(set) var buffer = ByteBuffer(integer: UInt8(ascii: "{"))
    private var lastKey: StaticString?

    init() {
        buffer.reserveCapacity(256)
    }

    /// Keys are the code's own: ASCII, nothing to escape.
    private mutating func key(_ key: StaticString) {
        if let lastKey {
            assert(String(describing: lastKey) < String(describing: key), "\(key) after \(lastKey): the API's JSON sorts its keys")
            buffer.writeInteger(UInt8(ascii: ","))
        }
        lastKey = key
        buffer.writeInteger(UInt8(ascii: "\""))
        buffer.writeStaticString(key)
        buffer.writeStaticString("\":")
    }

    mutating func add(_ name: StaticString, _ value: String?) {
        key(name)
        if let value { JSONString.write(value, to: &buffer) } else { buffer.writeStaticString("null") }
    }

    mutating func add(_ name: StaticString, _ value: Int64) {
        key(name)
        buffer.writeString(String(value))
    }

    mutating func add(_ name: StaticString, _ value: Bool) {
        key(name)
        buffer.writeStaticString(value ? "true" : "false")
    }

    /// As the API's encoder writes a date (`.iso8601`): UTC to the second, `2026-11-28T12:00:00Z`.
    mutating func add(_ name: StaticString, _ value: Date?) {
        key(name)
        guard let value else {
            buffer.writeStaticString("null")
            return
        }
        let time = UTCTime(value)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            var value = value
            if value >= divisor * 10 {
                // A year past 9999: all of its digits, as the encoder writes them.
                buffer.writeString(String(value))
                return
            }
            while divisor > 0 {
                buffer.writeInteger(UInt8(ascii: "0") + UInt8(value / divisor))
                value %= divisor
                divisor /= 10
            }
        }
        buffer.writeInteger(UInt8(ascii: "\""))
        digits(time.year, 4)
        buffer.writeInteger(UInt8(ascii: "-"))
        digits(time.month, 2)
        buffer.writeInteger(UInt8(ascii: "-"))
        digits(time.day, 2)
        buffer.writeInteger(UInt8(ascii: "T"))
        digits(time.hour, 2)
        buffer.writeInteger(UInt8(ascii: ":"))
        digits(time.minute, 2)
        buffer.writeInteger(UInt8(ascii: ":"))
        digits(time.second, 2)
        buffer.writeStaticString("Z\"")
    }

    /// The object, closed.
    mutating func finished() -> ByteBuffer {
        buffer.writeInteger(UInt8(ascii: "}"))
        return buffer
    }
}

/// A date's UTC calendar fields to the second, by arithmetic: glibc's `gmtime_r` takes the time-zone lock on every
/// call, which every request that writes a date then waits on.
struct UTCTime: Equatable {
    let year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int

    init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        (self.year, self.month, self.day, self.hour, self.minute, self.second) = (year, month, day, hour, minute, second)
    }

    /// Days from 1970-01-01 to the proleptic Gregorian date, in 400-year eras (Howard Hinnant's `civil_from_days`).
    init(_ date: Date) {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let ofDay = seconds - days * 86_400
        (hour, minute, second) = (ofDay / 3600, ofDay % 3600 / 60, ofDay % 60)
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }
}
