import HTTPTypes
import Hummingbird

/// An error with a status and words for a person; rendered as an HTML page or JSON by ErrorMiddleware.
public struct AppError: Error, CustomStringConvertible {
    public let status: HTTPResponse.Status
    /// In the default language: for logs, and for answers that have no reader to ask.
    public let title: String
    public let message: String
    /// The same words by catalog key, said in each reader's language when the answer is written; nil: as given.
    let phrases: (title: Phrase, message: Phrase)?

    public init(_ status: HTTPResponse.Status, title: String? = nil, message: String) {
        self.status = status
        self.title = title ?? status.reasonPhrase
        self.message = message
        phrases = nil
    }

    init(_ status: HTTPResponse.Status, title: Phrase, message: Phrase) {
        self.status = status
        let fallback = Languages.shipped?.fallback
        self.title = fallback?.say(title) ?? title.key
        self.message = fallback?.say(message) ?? message.key
        phrases = (title, message)
    }

    /// A message whose page is titled by its status alone ("Error 404").
    init(_ status: HTTPResponse.Status, message: Phrase) {
        self.init(status, title: Phrase("errors.status", ["status": "\(status.code)"]), message: message)
    }

    /// Its title and message in `language`.
    func words(in language: Language) -> (title: String, message: String) {
        phrases.map { (language.say($0.title), language.say($0.message)) } ?? (title, message)
    }

    public var description: String { "\(status.code) \(message)" }
}

extension String {
    /// nil for "": an optional field sent empty is as good as one not sent.
    var nonEmpty: String? { isEmpty ? nil : self }
}

extension StringProtocol {
    /// Nothing but white space: Unicode's White_Space, plus the separators U+001C–U+001F that Python counts as
    /// space. The OpenAPI pattern names U+001C–U+001F and U+0085 outright, so every regex engine agrees with this.
    var isBlank: Bool {
        unicodeScalars.allSatisfy { $0.properties.isWhitespace || (0x1C...0x1F).contains($0.value) }
    }
}

/// Input that does not validate: field → messages, Rails-style (`{"title": [Phrase("errors.blank")]}`), each said in the
/// reader's language when the answer is written (the fields' names stay as they are in every language).
/// JSON clients get 422 `{"errors": …}`; HTML controllers catch it and show the form again.
struct ValidationFailed: Error {
    let errors: [String: [Phrase]]
    /// 422, or 413 for a file too large to take.
    var status: HTTPResponse.Status = .unprocessableContent

    /// The messages in `language`, by field.
    func messages(in language: Language) -> [String: [String]] {
        errors.mapValues { $0.map(language.say) }
    }

    /// "Title can't be blank", one sentence per message, fields in a stable order.
    func fullMessages(in language: Language) -> [String] {
        errors.keys.sorted().flatMap { field in
            errors[field, default: []].map { Self.fullMessage(field: field, language.say($0), in: language) }
        }
    }

    /// The fields whose names the catalogs hold (`attributes.<field>`); any other is said as it is spelt.
    static let namedFields = ["title", "content", "picture", "alt", "name", "email", "password", "current_password", "accept_terms", "locale", "version"]

    /// A field's message as a sentence in `language`: "Title can't be blank", "Título não pode ficar em branco",
    /// "标题不能为空" (Rails' `errors.format`).
    static func fullMessage(field: String, _ message: String, in language: Language) -> String {
        let attribute: String
        if namedFields.contains(field) {
            attribute = language.text("attributes." + field)
        } else {
            let words = field.replacingOccurrences(of: "_", with: " ")
            attribute = words.prefix(1).uppercased() + words.dropFirst()
        }
        return language.text("errors.format", ["attribute": attribute, "message": message])
    }
}
