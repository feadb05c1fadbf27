import FoyerServer
/// Templates say their words by key, `{{t posts.index.title}}`: each language gets its own copy of every template,
/// made once at start, with each such tag replaced by its message (escaped as HTML) and the message's own
/// placeholders (`{{count}}`) left as the template's variables. A page in any language then costs what it did in one.
/// As in Rails, a key ending in `_html` holds markup (a link, `<strong>`) and goes in as it is: catalogs are part of
/// the package, reviewed like templates.
enum TemplateWords {
    static let opening = "{{t "

    /// The template with its words in `language`; an unknown key, or a plural message (whose form a template cannot
    /// pick: its view gives the words instead), stops start-up naming the template.
    static func translate(_ template: String, named name: String, in language: Language) throws -> String {
        guard template.utf8.containsBytes(of: opening.utf8) else { return template }
        var result = ""
        var rest = template[...]
        while let open = rest.firstRange(ofBytes: opening) {
            result += rest[..<open.lowerBound]
            guard let close = rest[open.upperBound...].firstRange(ofBytes: "}}") else {
                throw StartupError("Templates/\(name).mustache: a {{t tag is not closed")
            }
            let key = String(rest[open.upperBound..<close.lowerBound].trimmingBlanks)
            switch language.catalog.messages[key] {
            case .text(let message) where key.hasSuffix("_html"):
                result += message
            case .text(let message):
                for (index, piece) in Language.pieces(of: message).enumerated() {
                    result += index.isMultiple(of: 2) ? HTML.escape(String(piece)) : "{{\(piece)}}"
                }
            case .plural:
                throw StartupError("Templates/\(name).mustache: \(key) is a plural message; its view must say it with the count")
            case nil:
                throw StartupError("Templates/\(name).mustache uses \(key), which \(language.tag).po does not have")
            }
            rest = rest[close.upperBound...]
        }
        return result + rest
    }

    /// The keys a template uses, for the test that every one is in every catalog.
    static func keys(in template: String) -> [String] {
        var keys: [String] = []
        var rest = template[...]
        while let open = rest.firstRange(ofBytes: opening), let close = rest[open.upperBound...].firstRange(ofBytes: "}}") {
            keys.append(String(rest[open.upperBound..<close.lowerBound].trimmingBlanks))
            rest = rest[close.upperBound...]
        }
        return keys
    }
}
