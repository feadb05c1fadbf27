import Foundation
import FoyerServer
import Hummingbird
import NIOConcurrencyHelpers

/// A language Foyer speaks: its catalog's messages, and Foundation's locale for dates and numbers.
final class Language: Sendable, CustomStringConvertible {
    /// Its place among `Languages.all`: what per-language tables are indexed by.
    let index: Int
    /// BCP 47: `en`, `pt-BR`, `zh-Hans`. What `<html lang>`, `Content-Language` and the account's setting say.
    let tag: String
    let locale: Locale
    let catalog: Catalog

    init(index: Int, catalog: Catalog) {
        self.index = index
        self.catalog = catalog
        tag = catalog.tag
        locale = Locale(identifier: catalog.tag)
    }

    var description: String { tag }

    /// `count` as the locale writes numbers. Foundation's formatting costs 7 µs a call, and pages say the same few
    /// counts again and again (the account deletion page three of them).
    func number(_ count: Int) -> String {
        numbers.value(for: count) { count.formatted(.number.locale(locale)) }
    }

    private let numbers = StartOverCache<Int, String>(maximumCost: 4096)

    /// Words of the pages that scripts say too, under their full keys: one message, not a twin for scripts.
    static let pageWordsScriptsSay: Set<String> = ["tasks.status.open", "tasks.status.assigned", "tasks.status.complete"]

    /// The words scripts show (the catalog's `js.*` messages, without the prefix, and `pageWordsScriptsSay`), as JSON a
    /// page carries in `<script type="application/json" id="foyer-words">`: `<` is escaped, so nothing in it can end
    /// the element.
    var scriptWords: String {
        var words: [String: String] = [:]
        for case let (key, .text(message)) in catalog.messages {
            if key.hasPrefix("js.") {
                words[String(key.dropFirst(3))] = message
            } else if Self.pageWordsScriptsSay.contains(key) {
                words[key] = message
            }
        }
        // Written by hand: JSONSerialization (its sorting through AnyHashable above all) was a seventh of compiling
        // a language's templates at start.
        var json = "{"
        for (index, key) in words.keys.sorted().enumerated() {
            if index > 0 { json += "," }
            JSONString.append(key, to: &json, escapingLessThan: true)
            json += ":"
            JSONString.append(words[key]!, to: &json, escapingLessThan: true)
        }
        return json + "}"
    }

    /// A message, its `{{placeholders}}` filled from `values` (a placeholder with no value is left empty).
    func text(_ key: String, _ values: [String: String] = [:]) -> String {
        switch catalog.messages[key] {
        case .text(let text): Self.fill(text, values)
        case .plural(let forms): Self.fill(forms[forms.count - 1], values)
        case nil: key
        }
    }

    /// A plural message in the form `count` takes in this language, `{{count}}` written as the locale writes numbers.
    func plural(_ key: String, count: Int, _ values: [String: String] = [:]) -> String {
        var values = values
        values["count"] = number(count)
        switch catalog.messages[key] {
        case .plural(let forms): return Self.fill(forms[catalog.plural.form(for: count)], values)
        case .text(let text): return Self.fill(text, values)
        case nil: return key
        }
    }

    func say(_ phrase: Phrase) -> String {
        if phrase.key.isEmpty { return phrase.values["text"] ?? "" }
        if let count = phrase.count { return plural(phrase.key, count: count, phrase.values) }
        return text(phrase.key, phrase.values)
    }

    /// Splits a message at its placeholders: literal text and names, alternately (the first piece is literal).
    static func pieces(of message: String) -> [Substring] {
        var pieces: [Substring] = []
        var rest = message[...]
        while let open = rest.firstRange(ofBytes: "{{"), let close = rest[open.upperBound...].firstRange(ofBytes: "}}") {
            pieces.append(rest[..<open.lowerBound])
            pieces.append(rest[open.upperBound..<close.lowerBound])
            rest = rest[close.upperBound...]
        }
        pieces.append(rest)
        return pieces
    }

    private static func fill(_ message: String, _ values: [String: String]) -> String {
        guard message.utf8.containsBytes(of: "{{".utf8) else { return message }
        var result = ""
        for (index, piece) in pieces(of: message).enumerated() {
            result += index.isMultiple(of: 2) ? String(piece) : values[String(piece.trimmingBlanks)] ?? ""
        }
        return result
    }
}

/// Words for a person, to be said in their language when the answer is written: a catalog key, the values of its
/// placeholders, and for a plural message the count that picks its form.
struct Phrase: Sendable, Equatable {
    let key: String
    var values: [String: String] = [:]
    var count: Int?

    init(_ key: String, _ values: [String: String] = [:], count: Int? = nil) {
        (self.key, self.values, self.count) = (key, values, count)
    }

    /// Words said the same in every language: a provider's own message, a name.
    init(verbatim text: String) {
        (key, values) = ("", ["text": text])
    }
}

/// The languages Foyer speaks (one catalog each, `Resources/Languages/*.po`) and how a request's is chosen.
final class Languages: Sendable {
    let all: [Language]
    /// Whom nothing else decides for: `--default-locale`, English unless set.
    let fallback: Language
    /// Each language's likely script and region (`zh-Hans` → `zh-Hans-CN`), which a request's tag is matched on
    /// when no catalog has it exactly.
    private let maximal: [(language: String, script: String, region: String)]
    /// `Accept-Language` values seen, with the language each chose: a browser sends the same one every time.
    private let choices = NIOLockedValueBox([String: Int]())
    private static let choicesKept = 512

    init(catalogs: [Catalog], defaultTag: String = "en") throws {
        guard !catalogs.isEmpty else { throw StartupError("No language catalogs: Resources/Languages/*.po are missing") }
        let sorted = catalogs.sorted { $0.tag < $1.tag }
        all = sorted.enumerated().map { Language(index: $0, catalog: $1) }
        maximal = all.map { Self.maximal($0.tag) }
        guard let fallback = all.first(where: { $0.tag.lowercased() == defaultTag.lowercased() }) else {
            throw StartupError("--default-locale \(defaultTag) is not one of Foyer's languages (\(sorted.map(\.tag).joined(separator: ", ")))")
        }
        self.fallback = fallback
        // Every catalog says every message: a word missing in one language is a start-up error, not a blank.
        let keys = Set(fallback.catalog.messages.keys)
        for language in all where Set(language.catalog.messages.keys) != keys {
            let missing = keys.subtracting(language.catalog.messages.keys).sorted()
            let extra = Set(language.catalog.messages.keys).subtracting(keys).sorted()
            throw StartupError(
                "\(language.tag).po does not have the same messages as \(fallback.tag).po: missing \(missing.prefix(5).joined(separator: ", ")); extra \(extra.prefix(5).joined(separator: ", "))"
            )
        }
    }

    /// The shipped catalogs, for words said outside any request (the command line's messages); nil without the bundle.
    static let shipped: Languages? = try? bundled()

    /// The catalogs shipped in Foyer's resource bundle, read once per process.
    static func bundled(defaultTag: String = "en") throws -> Languages {
        let catalogs = try shippedCatalogs.get()
        return try Languages(catalogs: catalogs, defaultTag: defaultTag)
    }

    /// Starts reading the shipped catalogs on another thread (`readLanguageCatalogsAhead`).
    static func readShippedCatalogsAhead() {
        DispatchQueue.global(qos: .userInitiated).async { _ = shippedCatalogs }
    }

    private static let shippedCatalogs = Result<[Catalog], any Error> {
        guard let directory = Bundle.module.url(forResource: "Languages", withExtension: nil) else {
            throw StartupError("Resources/Languages is missing from Foyer's resource bundle (foyer_Foyer.resources): ship it beside the binary")
        }
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil).filter { $0.pathExtension == "po" }
        // One file per core at once: reading them was a tenth of start-up.
        let read = NIOLockedValueBox([Int: Result<Catalog, any Error>]())
        DispatchQueue.concurrentPerform(iterations: files.count) { index in
            let catalog = Result { try Catalog(contentsOf: files[index]) }
            read.withLockedValue { $0[index] = catalog }
        }
        do {
            let catalogs = read.withLockedValue { $0 }
            return try files.indices.map { try catalogs[$0]!.get() }
        } catch let error as CatalogError {
            throw StartupError("Resources/Languages/\(error.description)")
        }
    }

    /// The language a tag names (an account's setting, a `locale` sent to the API): exactly, or the way
    /// `Accept-Language` would choose it (`pt` → `pt-BR`). nil: none of ours.
    func language(tag: String) -> Language? {
        guard tag.utf8.count <= 35, !tag.isEmpty, tag != "*" else { return nil }
        return match(tag)
    }

    /// A request's language: the signed-in account's setting, else the first of `Accept-Language` we speak.
    func choose(for request: Request, locale: String?) -> Language {
        if let locale, let language = language(tag: locale) { return language }
        return choose(acceptLanguage: request.headers.value(.acceptLanguage))
    }

    /// RFC 4647 lookup over `Accept-Language`'s ranges, best first: a range names a language exactly or once its
    /// last subtags are dropped (`en-GB` → `en`); failing that, by its language and likely script (`pt-PT` →
    /// `pt-BR`; `zh`, `zh-CN`, `zh-SG` → `zh-Hans`; `zh-TW`, being `zh-Hant`, goes on to the next range). `*` and
    /// a header that names none of ours: the default.
    func choose(acceptLanguage header: String?) -> Language {
        guard let header, !header.isEmpty else { return fallback }
        if let index = choices.withLockedValue({ $0[header] }) { return all[index] }
        let chosen = Self.ranges(header).lazy.compactMap { $0 == "*" ? self.fallback : self.match($0) }.first ?? fallback
        if header.utf8.count <= 256 {
            choices.withLockedValue { choices in
                if choices.count >= Self.choicesKept { choices.removeAll(keepingCapacity: true) }
                choices[header] = chosen.index
            }
        }
        return chosen
    }

    /// The ranges with a weight above 0, highest first; equal weights keep their order.
    static func ranges(_ header: String) -> [String] {
        var weighted: [(range: String, weight: Double, order: Int)] = []
        for (order, item) in header.split(separator: ",").prefix(32).enumerated() {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let range = parts.first, !range.isEmpty else { continue }
            var weight = 1.0
            for parameter in parts.dropFirst() where parameter.lowercased().hasPrefix("q=") {
                weight = Double(parameter.dropFirst(2)) ?? 0
            }
            if weight > 0 { weighted.append((range, weight, order)) }
        }
        return weighted.sorted { $0.weight != $1.weight ? $0.weight > $1.weight : $0.order < $1.order }.map(\.range)
    }

    private func match(_ range: String) -> Language? {
        var subtags = range.lowercased().split(separator: "-")
        while !subtags.isEmpty {
            let candidate = subtags.joined(separator: "-")
            if let exact = all.first(where: { $0.tag.lowercased() == candidate }) { return exact }
            subtags.removeLast()
            // A single-letter subtag (an extension or private use) goes with the one after it.
            if subtags.last?.count == 1 { subtags.removeLast() }
        }
        // Likely subtags only for a range that starts with a language (two or three letters), not `x-…` or `i-…`.
        let first = range.prefix { $0 != "-" }
        guard (2...3).contains(first.count), first.allSatisfy({ $0.isASCII && $0.isLetter }),
            range.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") })
        else { return nil }
        let wanted = Self.maximal(range)
        let sameScript = maximal.indices.filter { maximal[$0].language == wanted.language && maximal[$0].script == wanted.script }
        let index = sameScript.first { maximal[$0].region == wanted.region } ?? sameScript.first
        return index.map { all[$0] }
    }

    private static func maximal(_ tag: String) -> (language: String, script: String, region: String) {
        let language = Locale.Language(identifier: Locale.Language(identifier: tag).maximalIdentifier)
        return (
            language.languageCode?.identifier.lowercased() ?? tag.lowercased(), language.script?.identifier.lowercased() ?? "",
            language.region?.identifier.lowercased() ?? ""
        )
    }
}

/// Starts reading the language catalogs Foyer ships on another thread, for a command that will serve: they depend
/// on nothing the command line says, and parsing it takes one core 20 ms at the start of start-up, which the
/// catalogs then no longer wait behind.
public func readLanguageCatalogsAhead() { Languages.readShippedCatalogsAhead() }
