/// Plain text to HTML: escaped, blank lines make paragraphs, single line breaks stay line breaks.
/// Stored content is never trusted as markup, so no sanitiser is needed.
enum PostText {
    /// A post's HTML by its text: read far more often than written, and the same text always makes the same HTML.
    private static let made = StartOverCache<String, String>(maximumCost: 8 << 20)

    static func html(_ text: String) -> String {
        made.value(for: text, orMake: { render(text) }, cost: { text.utf8.count + $0.utf8.count })
    }

    private static func render(_ text: String) -> String {
        let normalized = text.replacingOccurrences(of: "\r\n", with: "\n")
        var html = ""
        var paragraph: [Substring] = []
        func flush() {
            guard !paragraph.isEmpty else { return }
            html += "<p>" + paragraph.map { HTML.escape($0) }.joined(separator: "<br>\n") + "</p>\n"
            paragraph.removeAll()
        }
        for line in normalized.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.allSatisfy(\.isWhitespace) { flush() } else { paragraph.append(line) }
        }
        flush()
        return html
    }

    /// The first words of a post, for lists: its text with each run of whitespace made one space, cut after
    /// `length` characters with "…". Read only as far as the cut: splitting whole posts cost a profile page of 50
    /// short ones 50 µs, and a long post costs as much more as it is long.
    static func excerpt(_ text: String, length: Int = 160) -> String {
        if let ascii = asciiExcerpt(text, length: length) { return ascii }
        var excerpt = ""
        var count = 0
        var spaceBefore = false
        for character in text {
            if isWhitespace(character) {
                spaceBefore = count > 0
                continue
            }
            if spaceBefore {
                if count == length { return excerpt + "…" }
                excerpt.append(" ")
                count += 1
                spaceBefore = false
            }
            if count == length { return excerpt + "…" }
            excerpt.append(character)
            count += 1
        }
        return excerpt
    }

    /// The same by bytes, while the text up to the cut is ASCII (each byte a character, CR LF aside, which is
    /// whitespace either way); nil at the first other byte. Walking Characters was 9 µs a row.
    private static func asciiExcerpt(_ text: String, length: Int) -> String? {
        var text = text
        return text.withUTF8 { bytes -> String? in
            var excerpt: [UInt8] = []
            excerpt.reserveCapacity(min(bytes.count, length + 3))
            var spaceBefore = false
            for byte in bytes {
                guard byte < 0x80 else { return nil }
                if isASCIIWhitespace(byte) {
                    spaceBefore = !excerpt.isEmpty
                    continue
                }
                if spaceBefore {
                    if excerpt.count == length { return String(decoding: excerpt, as: UTF8.self) + "…" }
                    excerpt.append(0x20)
                    spaceBefore = false
                }
                if excerpt.count == length { return String(decoding: excerpt, as: UTF8.self) + "…" }
                excerpt.append(byte)
            }
            return String(decoding: excerpt, as: UTF8.self)
        }
    }

    /// `Character.isWhitespace`, with ASCII answered without Unicode's property tables (a lookup per character was
    /// 9 % of a profile page's CPU).
    private static func isWhitespace(_ character: Character) -> Bool {
        guard let ascii = character.asciiValue else { return character.isWhitespace }
        return isASCIIWhitespace(ascii)
    }

    /// What Unicode calls whitespace among ASCII: space, and tab through carriage return (not U+001C–U+001F).
    private static func isASCIIWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || (0x09...0x0D).contains(byte)
    }
}
