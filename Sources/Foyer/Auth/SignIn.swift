import Foundation
import HTTPTypes
import Hummingbird

/// What the API and the web form share: check credentials, open a session for this device, set its cookie.
struct SignIn: Sendable {
    static let wrongCredentials = "That email or password is incorrect"

    let users: UserRepository
    let sessions: SessionRepository
    /// When set, passwords are checked by the Keycloak realm and its tokens kept with each session.
    let keycloak: KeycloakSessions?
    let throttle: SignInThrottle
    let secureCookies: Bool
    let trustProxy: Bool
    let sessionLifetime: SessionLifetime
    let metrics: FoyerMetrics

    /// Someone whose password checked out, with the Keycloak tokens that came with it (if Keycloak checked it).
    struct Verified {
        let user: User
        let keycloakTokens: KeycloakTokenSet?
    }

    /// Checks a login (an email, or a Keycloak username) and password with whoever holds the accounts;
    /// nil when they are wrong. Keycloak not answering is a 503, not a wrong password. Throws
    /// `SignInThrottle.Throttled` without checking anything when the login or the client failed too often.
    func verify(login: String, password: String, request: Request, context: FoyerRequestContext) async throws -> Verified? {
        let attempt: SignInThrottle.Attempt
        do {
            attempt = try await throttle.begin(login: login, clientIP: request.clientIP(context: context, trustProxy: trustProxy))
        } catch let throttled as SignInThrottle.Throttled {
            metrics.signIn(.throttled)
            throw throttled
        }
        let verified: Verified?
        do {
            verified = try await check(login: login, password: password)
        } catch {
            metrics.signIn(.refused)
            try? await throttle.abandon(attempt)
            throw error
        }
        // A wrong password stays counted; a right one takes its count back.
        if verified != nil { try await throttle.succeeded(attempt, login: login) } else { metrics.signIn(.wrongPassword) }
        return verified
    }

    private func check(login: String, password: String) async throws -> Verified? {
        guard let keycloak else {
            return try await users.authenticate(email: login, password: password).map { Verified(user: $0, keycloakTokens: nil) }
        }
        return try await keycloak.authenticate(username: login, password: password).map { Verified(user: $0, keycloakTokens: $1) }
    }

    func openSession(for verified: Verified, request: Request, context: some RemoteAddressRequestContext) async throws -> (AuthSession, token: String) {
        let (session, token) = try await sessions.create(
            for: verified.user,
            userAgent: request.headers[.userAgent],
            ipAddress: request.clientIP(context: context, trustProxy: trustProxy)
        )
        if let tokens = verified.keycloakTokens {
            try await keycloak?.keep(tokens, forSession: session.id)
        }
        metrics.signIn(.success)
        return (session, token)
    }

    /// Ends one of the user's sessions, and its Keycloak session with it; false when it is not theirs or not live.
    func revoke(session id: String, userId: Int64) async throws -> Bool {
        guard try await sessions.revoke(id: id, userId: userId) else { return false }
        try await keycloak?.logout(session: id)
        return true
    }

    func cookie(token: String, request: Request) -> Cookie {
        SessionCookie.issue(token: token, maxAge: sessionLifetime.maximumAge, secure: cookiesAreSecure(for: request))
    }

    func expiredCookie(request: Request) -> Cookie {
        SessionCookie.expired(secure: cookiesAreSecure(for: request))
    }

    /// `Secure` when configured so, or when the client came over https (to us or to the load balancer).
    func cookiesAreSecure(for request: Request) -> Bool {
        secureCookies || request.cameOverHTTPS
    }
}
