/// What a password must be, as NIST SP 800-63B (§3.1.1.2) asks: long enough, long ones welcome, no composition
/// rules, and not one that lists of leaked passwords hold. Lengths count characters as a person types them.
enum PasswordRules {
    static let minimumLength = 8
    /// Far past the 64 NIST asks to accept; a bound all the same, since the password is hashed whole.
    static let maximumLength = 1_000

    /// What is wrong with `password`, each message to follow "Password …"; empty when it will do.
    static func problems(_ password: String, email: String?) -> [Phrase] {
        let length = password.count
        if length < minimumLength { return [Phrase("errors.too_short", count: minimumLength)] }
        if length > maximumLength { return [Phrase("errors.too_long", count: maximumLength)] }
        if CommonPasswords.contains(password) { return [Phrase("errors.common_password")] }
        if let email, password.lowercased() == email.lowercased() || password.lowercased() == email.split(separator: "@").first?.lowercased() {
            return [Phrase("errors.is_your_email")]
        }
        return []
    }
}
