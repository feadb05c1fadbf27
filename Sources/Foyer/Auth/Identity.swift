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
    public let session: AuthSession
    public let credential: Credential
    /// The raw token as presented: needed to hand a Bearer sign-in over to the WebView's cookie.
    let token: String

    public var userId: Int64 { user.id ?? 0 }
}

/// Thrown where a signed-in user is required; the error middleware turns it into a 401 in the client's format.
public struct AuthenticationRequired: Error {}
