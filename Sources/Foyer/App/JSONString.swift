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
