/// What a password must be, as NIST SP 800-63B (§3.1.1.2) asks: long enough, long ones welcome, no composition
/// rules, and not one that lists of leaked passwords hold. Lengths count characters as a person types them.
enum PasswordRules {
    static let minimumLength = 8
    /// Far past the 64 NIST asks to accept; a bound all the same, since the password is hashed whole.
    static let maximumLength = 1_000

    /// What is wrong with `password`, each message to follow "Password …"; empty when it will do.
    static func problems(_ password: String, email: String?) -> [String] {
        let length = password.count
        if length < minimumLength { return ["is too short (minimum is \(minimumLength) characters)"] }
        if length > maximumLength { return ["is too long (maximum is \(maximumLength) characters)"] }
        if CommonPasswords.contains(password) { return ["is one of the most common passwords: choose another"] }
        if let email, password.lowercased() == email.lowercased() || password.lowercased() == email.split(separator: "@").first?.lowercased() {
            return ["can't be your email address"]
        }
        return []
    }
}
