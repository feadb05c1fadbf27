import Foundation
import FoyerServer

/// Words an operator watches for in posts (`--watched-words FILE`), as Discourse's watched words: a line
/// `block: WORD` refuses a post that has it, `review: WORD` holds the post for a moderator. A word is matched whole
/// and in any case; it may be several words (`review: free money`). `#` starts a comment.
struct WatchedWords: Sendable {
    enum Kind: String, Sendable {
        case block, review
    }

    private(set) var blocked: [String] = []
    private(set) var reviewed: [String] = []

    init() {}

    init(contentsOf file: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw StartupError("--watched-words \(file) cannot be read: \(error.localizedDescription)")
        }
        try self.init(parsing: text, file: file)
    }

    init(parsing text: String, file: String = "watched words") throws {
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            guard !line.isBlank else { continue }
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, let kind = Kind(rawValue: parts[0].lowercased()), !parts[1].isEmpty else {
                throw StartupError("\(file) line \(number + 1): write `block: WORD` or `review: WORD`, not \"\(line.trimmingCharacters(in: .whitespaces))\"")
            }
            let word = parts[1].lowercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
            switch kind {
            case .block: blocked.append(word)
            case .review: reviewed.append(word)
            }
        }
    }

    var isEmpty: Bool { blocked.isEmpty && reviewed.isEmpty }

    /// The first blocked word in `text`, else the first reviewed one.
    func match(_ text: String) -> (kind: Kind, word: String)? {
        guard !isEmpty else { return nil }
        let words = Self.words(of: text)
        if let word = blocked.first(where: { Self.contains(words, $0) }) { return (.block, word) }
        if let word = reviewed.first(where: { Self.contains(words, $0) }) { return (.review, word) }
        return nil
    }

    /// Lowercased words, split at anything that is not a letter or a digit.
    private static func words(of text: String) -> [Substring] {
        text.lowercased().split { !($0.isLetter || $0.isNumber) }
    }

    private static func contains(_ words: [Substring], _ phrase: String) -> Bool {
        let wanted = phrase.split { !($0.isLetter || $0.isNumber) }
        guard !wanted.isEmpty, words.count >= wanted.count else { return false }
        return (0...(words.count - wanted.count)).contains { start in
            zip(words[start..<(start + wanted.count)], wanted).allSatisfy { $0 == $1 }
        }
    }
}
