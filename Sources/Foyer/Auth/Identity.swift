import Foundation

/// Who made a request, and how they proved it. A class, not a struct: the request's context carries it through
/// every middleware and closure, and each copy of a struct copied the user's and the session's fields.
public final class Identity: Sendable {
    public enum Credential: Sendable {
        /// The session cookie: a browser or a WebView. Unsafe requests must carry the CSRF token.
        case cookie
        /// `Authorization: Bearer` or `Token`: native code or curl. No CSRF: a cross-site page cannot set this header.
        case bearer
        /// `Authorization: DPoP` with a proof from the key the session is bound to: native code. No CSRF either.
        case dpop
    }

    public let user: User
    /// The Foyer session; nil for an app that presented its provider's access token instead of signing in here.
    public let session: AuthSession?
    public let credential: Credential
    /// The raw token as presented: needed to hand a Bearer sign-in over to the WebView's cookie.
    let token: String
    /// The provider's access token the caller presented, verified: relayed upstream as it is.
    let providerToken: VerifiedToken?

    init(user: User, session: AuthSession, credential: Credential, token: String) {
        self.user = user
        self.session = session
        self.credential = credential
        self.token = token
        providerToken = nil
    }

    init(user: User, providerToken: VerifiedToken) {
        self.user = user
        session = nil
        credential = .bearer
        token = providerToken.raw
        self.providerToken = providerToken
    }

    public var userId: Int64 { user.id ?? 0 }
}

/// Thrown where a signed-in user is required; the error middleware turns it into a 401 in the client's format.
public struct AuthenticationRequired: Error {
    /// Why a presented token was refused (RFC 6750 `invalid_token`); nil when none was presented.
    let invalidToken: String?

    init(invalidToken: String? = nil) {
        self.invalidToken = invalidToken
    }
}

/// A caller's roles at their provider, or nil when their account carries none (local accounts, providers without a
/// roles claim): then no check by role applies.
typealias RealmRoleSource = @Sendable (Identity) async throws -> Set<String>?
