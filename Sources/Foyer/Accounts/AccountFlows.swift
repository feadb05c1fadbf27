import Foundation

/// What the account flows share: their rows, the mail they send, sign-in (to check passwords and end sessions) and
/// the throttle that counts requests which mail someone.
struct AccountFlows: Sendable {
    let storage: any AccountStorage
    let signIn: SignIn
    let mail: AccountMail
    let outbox: MailSender
    let throttle: SignInThrottle
    /// The account's devices at Unified Push, when Foyer relays to one.
    let devices: PushDeviceRepository?

    /// Ends the account's sessions but `except` (the one making the request): `SignIn.endSessions`.
    func endSessions(of userId: Int64, except: String?) async throws {
        try await signIn.endSessions(of: userId, except: except)
    }

    /// The account's row changed (a name, a confirmed address): cached sign-ins read it again, on every instance.
    func accountChanged(userId: Int64) {
        signIn.sessions.forgetCachedSignIns(of: userId)
    }

    /// A password the account's owner must type again to change or delete it: nil when it matches, else the
    /// Rails-style error for `current_password` (or `password`). Wrong ones count like failed sign-ins (a stolen
    /// session cannot guess its way to the password); throws `SignInThrottle.Throttled` past the limit.
    func checkPassword(_ password: String?, of user: User, field: String = "current_password", clientIP: String?) async throws -> ValidationFailed? {
        guard let password, !password.isEmpty else { return ValidationFailed(errors: [field: [Phrase("errors.blank")]]) }
        let attempt = try await throttle.begin(login: user.email, clientIP: clientIP)
        // An account made with a passkey has no password yet: a reset mail gives it one.
        guard user.hasPassword, try await signIn.users.passwords.verify(password, hash: user.passwordHash) else {
            return ValidationFailed(errors: [field: [user.hasPassword ? Phrase("errors.incorrect") : Phrase("errors.passkey_only")]])
        }
        try await throttle.succeeded(attempt, login: user.email)
        return nil
    }
}
