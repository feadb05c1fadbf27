/// One field of a form as templates show it: its value, and the message that says what is wrong with it. The
/// template ties the message to the field (`aria-invalid`, `aria-describedby="{{name}}-error"`).
struct FormField: Sendable {
    let name: String
    let value: String
    /// "Title can't be blank"; nil when the field is fine.
    let error: String?

    init(_ name: String, value: String, errors: [String: [String]] = [:]) {
        self.name = name
        self.value = value
        let words = name.replacingOccurrences(of: "_", with: " ")
        let label = words.prefix(1).uppercased() + words.dropFirst()
        error = errors[name].map { messages in messages.map { "\(label) \($0)" }.joined(separator: ". ") }
    }
}
