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

    static let cookieName = "foyer_flash"

    var message: String {
        switch self {
        case .postPublished: "Your post is published."
        case .postSaved: "Your changes are saved."
        case .postMerged: "Your changes are saved, together with the change you saved meanwhile elsewhere (another tab or device): each changed other parts of the post."
        case .postDeleted: "The post is deleted."
        case .taskCreated: "The task is created."
        case .taskSaved: "The task is saved."
        case .taskDeleted: "The task is deleted."
        case .signedIn: "You are signed in."
        case .signedOut: "You are signed out."
        case .sessionRevoked: "That device is signed out."
        case .otherSessionsSignedOut: "Every other device is signed out."
        case .signedUp: "Welcome! Your account is made and you are signed in. A link to confirm your address is in your mail."
        case .emailConfirmed: "Your address is confirmed."
        case .confirmationMailed: "A link to confirm your address is on its way to your mail."
        case .resetMailed: "If an account has that address, a link to choose a new password is on its way to it."
        case .passwordReset: "Your password is changed and every device is signed out: sign in with the new one."
        case .nameChanged: "Your name is changed."
        case .passwordChanged: "Your password is changed, and every other device is signed out."
        case .emailChangeMailed: "A link to confirm the new address is on its way to it; until then you sign in with this one."
        case .accountDeleted: "Your account and everything in it are deleted."
        case .termsAccepted: "Thank you: you accepted the terms, and you may post."
        case .reportFiled: "Thank you: your report is with the moderators, who answer within 24 hours."
        case .moderationDone: "Done: the reports on it are closed, and the people concerned are told."
        case .roleChanged: "The role is changed."
        case .blocked: "Blocked: you will not see their posts or profile, nor they yours. The moderators are told."
        case .unblocked: "Unblocked."
        case .postHeld: "Your post is saved, and a moderator will look at it before others see it."
        case .passkeyAdded: "Your passkey is added: sign in with it on this device, or wherever it is synced."
        case .signedUpAddPasskey: "Welcome! Your account is made and you are signed in. Add your passkey below: it is how you will sign in. A link to confirm your address is in your mail."
        case .passkeyRenamed: "The passkey is renamed."
        case .passkeyRemoved: "The passkey is removed: it no longer signs in to this account."
        }
    }

    /// The notice a request carries, if any.
    init?(_ request: Request) {
        guard let value = request.rareCookie(Self.cookieName) else { return nil }
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
