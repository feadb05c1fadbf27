import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird

/// What the API and the web form share: check credentials, open a session for this device, set its cookie.
struct SignIn: Sendable {
    static let wrongCredentials = "That email or password is incorrect"

    let users: UserRepository
    let sessions: SessionRepository
    /// The providers people may sign in with; when Keycloak is one, it checks every password and its tokens are
    /// kept with each session.
    let providers: IdentityProviders
    let throttle: SignInThrottle
    let secureCookies: Bool
    let trustProxy: Bool
    let sessionLifetime: SessionLifetime
    let metrics: FoyerMetrics
    let idTokens: SingleUseIDTokens
    /// Binds a sign-in that carries a DPoP proof to the app's key.
    let binding: DeviceKeyBinding
    /// Checks a passkey's assertion (WebAuthn).
    let passkeys: Passkeys

    /// Someone who proved who they are, with what their provider handed over (nothing for a local account).
    struct Verified {
        let user: User
        let provider: ProviderSessions?
        /// From the provider's token endpoint (code, password or refresh grant).
        let tokens: ProviderTokenSet?
        /// A native app's ID token, verified.
        let idToken: VerifiedToken?

        init(user: User, provider: ProviderSessions? = nil, tokens: ProviderTokenSet? = nil, idToken: VerifiedToken? = nil) {
            (self.user, self.provider, self.tokens, self.idToken) = (user, provider, tokens, idToken)
        }
    }

    /// Checks a login (an email, or a provider's username) and password with whoever holds the accounts (`provider`
    /// when named, else Keycloak when configured, else the local accounts); nil when they are wrong. A provider not
    /// answering is a 503, not a wrong password. Throws `SignInThrottle.Throttled` without checking anything when
    /// the login or the client failed too often.
    func verify(
        login: String, password: String, provider: ProviderSessions? = nil, request: Request, context: FoyerRequestContext
    ) async throws -> Verified? {
        try await throttled(login: login, request: request, context: context) {
            try await check(login: login, password: password, provider: provider ?? providers.passwordChecker)
        }
    }

    /// A native app's ID token from `provider`: TokenRejected says why it is refused (each refusal counted against
    /// the client by the throttle like a wrong password, so forged tokens cannot be tried without end).
    func verify(idToken: String, nonce: String?, provider: ProviderSessions, request: Request, context: FoyerRequestContext) async throws -> Verified {
        var rejection: TokenRejected?
        let verified = try await throttled(login: nil, request: request, context: context) { () -> Verified? in
            do {
                let (user, token) = try await provider.user(signedInWithIDToken: idToken, nonce: nonce, singleUse: idTokens)
                return Verified(user: user, provider: provider, idToken: token)
            } catch let rejected as TokenRejected {
                rejection = rejected
                return nil
            }
        }
        guard let verified else { throw rejection ?? TokenRejected("The ID token was refused") }
        return verified
    }

    private func throttled(
        login: String?, request: Request, context: FoyerRequestContext, _ check: () async throws -> Verified?
    ) async throws -> Verified? {
        let attempt: SignInThrottle.Attempt
        do {
            attempt = try await throttle.begin(login: login, clientIP: request.clientIP(context: context, trustProxy: trustProxy))
        } catch let throttled as SignInThrottle.Throttled {
            metrics.signIn(.throttled)
            throw throttled
        }
        let verified: Verified?
        do {
            verified = try await check()
        } catch {
            metrics.signIn(.refused)
            try? await throttle.abandon(attempt)
            throw error
        }
        // A wrong password stays counted; a right one takes its count back.
        if verified != nil { try await throttle.succeeded(attempt, login: login) } else { metrics.signIn(.wrongPassword) }
        return verified
    }

    private func check(login: String, password: String, provider: ProviderSessions?) async throws -> Verified? {
        guard let provider else {
            return try await users.authenticate(email: login, password: password).map { Verified(user: $0) }
        }
        return try await provider.authenticate(username: login, password: password).map { Verified(user: $0, provider: provider, tokens: $1) }
    }

    /// A passkey's assertion: the account it signs in (WebAuthnRefusal says why not). Counted against the client by
    /// the throttle when refused, like a wrong password.
    func verify(passkey: AuthenticationResponseJSON, request: Request, context: FoyerRequestContext) async throws -> Verified {
        var refusal: WebAuthnRefusal?
        let verified = try await throttled(login: nil, request: request, context: context) { () -> Verified? in
            do {
                let userId = try await passkeys.authenticate(passkey, request: request)
                guard let user = try await users.storage.find(id: userId) else { throw WebAuthnRefusal("the passkey's account is gone") }
                return Verified(user: user)
            } catch let refused as WebAuthnRefusal {
                refusal = refused
                return nil
            }
        }
        guard let verified else { throw refusal ?? WebAuthnRefusal("the passkey was refused") }
        return verified
    }

    /// The DPoP proof of a sign-in request (no token yet, so no `ath`), spent; nil when it carries none.
    func signInProof(of request: Request) async throws -> DPoPProof? {
        try await binding.proof(of: request, accessToken: nil)
    }

    /// A new session for someone verified: bound to the key of `proof` when the sign-in carried one. `cookieToken` is
    /// what the WebView's cookie holds: the token itself, or for a bound session a token good only as the cookie.
    func openSession(
        for verified: Verified, request: Request, context: some RemoteAddressRequestContext, proof: DPoPProof? = nil
    ) async throws -> (AuthSession, token: String, cookieToken: String) {
        // Every way in (a password, a provider, an ID token, a sign-up) comes through here.
        if verified.user.suspendedAt != nil {
            metrics.signIn(.refused)
            throw AccountSuspended()
        }
        let (session, token, cookieToken) = try await sessions.create(
            for: verified.user,
            userAgent: request.headers.value(.userAgent),
            ipAddress: request.clientIP(context: context, trustProxy: trustProxy),
            dpopThumbprint: proof?.thumbprint
        )
        if let provider = verified.provider, let tokens = verified.tokens {
            try await provider.keep(tokens, forSession: session.id)
        } else if let provider = verified.provider, let idToken = verified.idToken {
            try await provider.keep(idToken: idToken, forSession: session.id)
        }
        metrics.signIn(.success)
        return (session, token, cookieToken)
    }

    /// Ends the account's sessions but `except`, with everything they hold open: streams get their signed-out event
    /// and websockets close with 4401 on every instance, and a provider's refresh token is revoked where it
    /// advertises how (RFC 7009).
    func endSessions(of userId: Int64, except: String? = nil) async throws {
        for session in try await sessions.list(userId: userId) where session.id != except {
            _ = try await revoke(session: session.id, userId: userId)
        }
    }

    /// Ends one of the user's sessions, and its provider's session with it; false when it is not theirs or not live.
    func revoke(session id: String, userId: Int64) async throws -> Bool {
        guard try await sessions.revoke(id: id, userId: userId) else { return false }
        try await providers.logout(session: id)
        return true
    }

    func cookie(token: String, request: Request) -> Cookie {
        SessionCookie.issue(token: token, maxAge: sessionLifetime.maximumAge, secure: cookiesAreSecure(for: request))
    }

    func expiredCookie(request: Request) -> Cookie {
        SessionCookie.expired(secure: cookiesAreSecure(for: request))
    }

    /// `response`, ending this browser's sign-in: the cookie expired, and what the browser kept of the user dropped.
    func signingOut(_ response: Response, request: Request) -> Response {
        var response = response
        response.setCookie(expiredCookie(request: request))
        response.headers[.clearSiteData] = Self.clearedOnSignOut
        return response
    }

    /// `Secure` when configured so, or when the client came over https (to us or to the load balancer).
    func cookiesAreSecure(for request: Request) -> Bool {
        secureCookies || request.cameOverHTTPS
    }
}

extension SignIn {
    /// What a browser drops when its user signs out: cached pages and stored data (the offline copies and queued
    /// writes a page or worker kept), so nothing of one user is left for the next on a shared device.
    static let clearedOnSignOut = "\"cache\", \"storage\""
}

extension HTTPField.Name {
    static let clearSiteData = HTTPField.Name("Clear-Site-Data")!
}

/// A moderator suspended the account: it may not sign in until they lift it.
struct AccountSuspended: Error {
    static let message = Phrase("sessions.errors.suspended")
}
