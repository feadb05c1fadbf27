import Foundation

/// One language's messages: a gettext PO file (`Resources/Languages/<tag>.po`), read once at start. Keys are the
/// `msgid`s (`posts.index.title`), as Rails' I18n keys; the English catalog is the source translators work from.
/// A message may hold placeholders, `{{name}}`, filled from the values it is given (in a template: the template's
/// own values). A plural message has one `msgstr[i]` per form of the header's `Plural-Forms`.
struct Catalog: Sendable {
    enum Message: Sendable, Equatable {
        case text(String)
        case plural([String])
    }

    /// The language as BCP 47 says it (`pt-BR`, `zh-Hans`), from the header's `Language:` (gettext writes `pt_BR`).
    let tag: String
    let plural: PluralRule
    let messages: [String: Message]
    /// Tells one catalog's text from another's (the file's digest): views compiled from the same ones are the same.
    let fingerprint: String

    /// A catalog made in code (tests): a fingerprint of its own, never taken for another's.
    init(tag: String, plural: PluralRule, messages: [String: Message]) {
        (self.tag, self.plural, self.messages, fingerprint) = (tag, plural, messages, UUID().uuidString)
    }

    init(contentsOf url: URL) throws {
        let text: String
        do { text = try String(contentsOf: url, encoding: .utf8) } catch {
            throw CatalogError("\(url.lastPathComponent) could not be read: \(error.localizedDescription)")
        }
        do { try self.init(po: text) } catch let error as CatalogError {
            throw CatalogError("\(url.lastPathComponent): \(error.description)")
        }
    }

    init(po text: String) throws {
        fingerprint = text.sha256Hex
        var entries = try Self.entries(text)
        guard let headerIndex = entries.firstIndex(where: { $0.id.isEmpty }) else { throw CatalogError("no header (msgid \"\")") }
        let header = Self.headerFields(entries.remove(at: headerIndex).strings[0] ?? "")
        guard let language = header["Language"], !language.isEmpty else { throw CatalogError("the header names no Language") }
        tag = language.replacingOccurrences(of: "_", with: "-")
        guard let forms = header["Plural-Forms"] else { throw CatalogError("the header has no Plural-Forms") }
        plural = try PluralRule(header: forms)
        var messages: [String: Message] = [:]
        for entry in entries {
            guard messages[entry.id] == nil else { throw CatalogError("\(entry.id) is there twice (line \(entry.line))") }
            if entry.isPlural {
                let forms = (0..<plural.count).map { entry.strings[$0] ?? "" }
                guard entry.strings.count == plural.count, forms.allSatisfy({ !$0.isEmpty }) else {
                    throw CatalogError("\(entry.id) needs \(plural.count) forms, msgstr[0] to msgstr[\(plural.count - 1)] (line \(entry.line))")
                }
                messages[entry.id] = .plural(forms)
            } else {
                guard let only = entry.strings[0], !only.isEmpty, entry.strings.count == 1 else {
                    throw CatalogError("\(entry.id) has no translation (line \(entry.line))")
                }
                messages[entry.id] = .text(only)
            }
        }
        self.messages = messages
    }

    private struct Entry {
        var id = ""
        var isPlural = false
        var strings: [Int: String] = [:]
        var line = 0
    }

    /// The entries of a PO file: `msgid`, `msgid_plural`, `msgstr` or `msgstr[i]`, each string possibly continued on
    /// the lines after it. Comments (`#…`) and `msgctxt` are for translators' tools; Foyer's keys need no context.
    /// Read as bytes: every keyword, quote and escape is ASCII, and a UTF-8 sequence never holds an ASCII byte, so no
    /// character is split (reading characters cost grapheme breaking over every catalog, a sixth of start-up).
    private static func entries(_ text: String) throws -> [Entry] {
        let bytes = Array(text.utf8)
        var entries: [Entry] = []
        var current: Entry?
        /// Where a continued string goes: the id (-1), the plural id (-2) or a form.
        var target = -1
        var number = 0
        var lineStart = 0
        while lineStart <= bytes.count {
            let lineEnd = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            defer { lineStart = lineEnd + 1 }
            number += 1
            let line = trimmingBlanks(bytes[lineStart..<lineEnd])
            guard let first = line.first, first != UInt8(ascii: "#") else { continue }
            if first == UInt8(ascii: "\"") {
                guard current != nil else { throw CatalogError("a string outside any entry (line \(number))") }
                let more = try unquote(line, line: number)
                switch target {
                case -1: current!.id += more
                case -2: break
                default: current!.strings[target, default: ""] += more
                }
                continue
            }
            let keyword = line.prefix { $0 != UInt8(ascii: " ") }
            let value = try unquote(trimmingBlanks(line[keyword.endIndex...]), line: number)
            if keyword.elementsEqual("msgctxt".utf8) { continue }
            if keyword.elementsEqual("msgid".utf8) {
                if let current { entries.append(current) }
                current = Entry(id: value, line: number)
                target = -1
            } else if keyword.elementsEqual("msgid_plural".utf8) {
                guard current != nil else { throw CatalogError("msgid_plural before msgid (line \(number))") }
                current!.isPlural = true
                target = -2
            } else if keyword.elementsEqual("msgstr".utf8) {
                guard current != nil else { throw CatalogError("msgstr before msgid (line \(number))") }
                current!.strings[0] = value
                target = 0
            } else {
                let name = String(decoding: keyword, as: UTF8.self)
                guard name.hasPrefix("msgstr["), name.hasSuffix("]"), let index = Int(name.dropFirst(7).dropLast()), (0..<6).contains(index),
                    current != nil
                else { throw CatalogError("\(name) is not PO (line \(number))") }
                current!.strings[index] = value
                target = index
            }
        }
        if let current { entries.append(current) }
        return entries
    }

    private static func trimmingBlanks(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r") }
        guard let first = line.firstIndex(where: { !isBlank($0) }), let last = line.lastIndex(where: { !isBlank($0) }) else {
            return line[line.endIndex...]
        }
        return line[first...last]
    }

    /// A quoted PO string's text.
    private static func unquote(_ bytes: ArraySlice<UInt8>, line: Int) throws -> String {
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "\""), bytes.last == UInt8(ascii: "\"") else {
            throw CatalogError("expected a quoted string (line \(line))")
        }
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var escaped = false
        for byte in bytes.dropFirst().dropLast() {
            if escaped {
                switch byte {
                case UInt8(ascii: "n"): result.append(UInt8(ascii: "\n"))
                case UInt8(ascii: "t"): result.append(UInt8(ascii: "\t"))
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): result.append(byte)
                default: throw CatalogError("\\\(Character(Unicode.Scalar(byte))) is no escape PO knows (line \(line))")
                }
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                throw CatalogError("a quote inside a string must be \\\" (line \(line))")
            } else {
                result.append(byte)
            }
        }
        guard !escaped else { throw CatalogError("a string ends in a lone \\ (line \(line))") }
        return String(decoding: result, as: UTF8.self)
    }

    private static func headerFields(_ header: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in header.split(separator: "\n") {
            let pair = line.split(separator: ":", maxSplits: 1)
            guard pair.count == 2 else { continue }
            fields[String(pair[0].trimmingBlanks)] = String(pair[1].trimmingBlanks)
        }
        return fields
    }
}

extension Substring {
    /// Without the spaces and tabs at either end. Foundation's `trimmingCharacters` goes through NSString, which was
    /// most of reading the catalogs at start.
    var trimmingBlanks: Substring {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else { return self[endIndex...] }
        return self[first...last]
    }
}

struct CatalogError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
