import Foundation

/// Who made a request, and how they proved it.
public struct Identity: Sendable {
    public enum Credential: Sendable {
        /// The session cookie: a browser or a WebView. Unsafe requests must carry the CSRF token.
        case cookie
        /// `Authorization: Bearer` or `Token`: native code or curl. No CSRF: a cross-site page cannot set this header.
        case bearer
    }

    public let user: User
    /// The Foyer session; nil for an app that presented its own Keycloak access token instead of signing in here.
    public let session: AuthSession?
    public let credential: Credential
    /// The raw token as presented: needed to hand a Bearer sign-in over to the WebView's cookie.
    let token: String
    /// The Keycloak access token the caller presented, verified: relayed upstream as it is.
    let keycloakToken: VerifiedKeycloakToken?

    init(user: User, session: AuthSession, credential: Credential, token: String) {
        self.user = user
        self.session = session
        self.credential = credential
        self.token = token
        keycloakToken = nil
    }

    init(user: User, keycloakToken: VerifiedKeycloakToken) {
        self.user = user
        session = nil
        credential = .bearer
        token = keycloakToken.raw
        self.keycloakToken = keycloakToken
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

/// A caller's realm roles, or nil when accounts carry no roles (local accounts): then no check by role applies.
typealias RealmRoleSource = @Sendable (Identity) async throws -> Set<String>?
