import Hummingbird

/// A one-shot notice after something was done ("Post published."), shown by the next page rendered and then
/// gone, as Rails' flash. It rides a short-lived cookie across the redirect that follows a form; the cookie holds
/// only which notice it is, so nobody can make a page say words of their own. A native shell follows a form with
/// a historical-location route it never shows, so those pages pass the notice on to the page it reloads.
enum Flash: String, CaseIterable, Sendable {
    case postPublished = "post-published"
    case postSaved = "post-saved"
    case postMerged = "post-merged"
    case postDeleted = "post-deleted"
    case taskCreated = "task-created"
    case taskSaved = "task-saved"
    case taskDeleted = "task-deleted"
    case signedIn = "signed-in"
    case signedOut = "signed-out"
    case sessionRevoked = "session-revoked"
    case otherSessionsSignedOut = "other-sessions-signed-out"
    case signedUp = "signed-up"
    case emailConfirmed = "email-confirmed"
    case confirmationMailed = "confirmation-mailed"
    case resetMailed = "reset-mailed"
    case passwordReset = "password-reset"
    case nameChanged = "name-changed"
    case passwordChanged = "password-changed"
    case emailChangeMailed = "email-change-mailed"
    case accountDeleted = "account-deleted"
    case termsAccepted = "terms-accepted"
    case reportFiled = "report-filed"
    case moderationDone = "moderation-done"
    case roleChanged = "role-changed"
    case blocked = "blocked"
    case postHeld = "post-held"
    case unblocked = "unblocked"
    case passkeyAdded = "passkey-added"
    case signedUpAddPasskey = "signed-up-add-passkey"
    case passkeyRenamed = "passkey-renamed"
    case passkeyRemoved = "passkey-removed"
    case languageChanged = "language-changed"

    static let cookieName = "foyer_flash"

    /// Its words: `flash.<name>` in the catalogs.
    var phrase: Phrase { Phrase("flash." + rawValue) }

    /// The notice a request carries, if any.
    init?(_ request: Request) {
        guard let value = request.cookie(named: Self.cookieName) else { return nil }
        self.init(rawValue: value)
    }

    var cookie: Cookie {
        Cookie(name: Self.cookieName, value: rawValue, maxAge: 60, path: "/", httpOnly: true, sameSite: .lax)
    }

    static var spent: Cookie {
        Cookie(name: cookieName, value: "", maxAge: 0, path: "/", httpOnly: true, sameSite: .lax)
    }
}

extension Response {
    /// This answer (a redirect, usually) leaves `flash` for the next page.
    func flashing(_ flash: Flash) -> Response {
        var response = self
        response.setCookie(flash.cookie)
        return response
    }
}
