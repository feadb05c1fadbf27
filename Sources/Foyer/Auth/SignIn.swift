import Foundation
import HTTPTypes
import Hummingbird

/// What the API and the web form share: check credentials, open a session for this device, set its cookie.
struct SignIn: Sendable {
    static let wrongCredentials = "That email or password is incorrect"

    let users: UserRepository
    let sessions: SessionStore
    let secureCookies: Bool
    let trustProxy: Bool

    func openSession(for user: User, request: Request, context: FoyerRequestContext) async throws -> (AuthSession, token: String) {
        try await sessions.create(
            for: user,
            userAgent: request.headers[.userAgent],
            ipAddress: request.clientIP(context: context, trustProxy: trustProxy)
        )
    }

    func cookie(token: String, request: Request) -> Cookie {
        SessionCookie.issue(token: token, secure: secureCookies || request.cameOverHTTPS)
    }

    func expiredCookie(request: Request) -> Cookie {
        SessionCookie.expired(secure: secureCookies || request.cameOverHTTPS)
    }
}
