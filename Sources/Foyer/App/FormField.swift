import Mustache

/// One field of a form as templates show it: its value, and the message that says what is wrong with it. The
/// template ties the message to the field (`aria-invalid`, `aria-describedby="{{name}}-error"`).
struct FormField: Sendable {
    let name: String
    let value: String
    /// "Title can't be blank"; nil when the field is fine.
    let error: String?

    init(_ name: String, value: String, errors: [String: [Phrase]] = [:], in language: Language) {
        self.name = name
        self.value = value
        error = errors[name].map { messages in
            messages.map { ValidationFailed.fullMessage(field: name, language.say($0), in: language) }.joined(separator: ". ")
        }
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension FormField: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "name": self.name
        case "value": value
        case "error": error
        default: nil
        }
    }
}
