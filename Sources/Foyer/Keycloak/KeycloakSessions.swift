import Foundation
import GRDB
import Hummingbird
import Logging
import NIOConcurrencyHelpers

/// A Foyer session's Keycloak tokens: kept server-side, never sent to the browser or the app.
struct KeycloakTokenRecord: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "keycloak_tokens"
    static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    var sessionId: String
    var accessToken: String
    var refreshToken: String?
    var idToken: String?
    var accessExpiresAt: Date
    /// The realm's session (`sid`): what a back-channel logout names.
    var keycloakSessionId: String?
}

/// Users who sign in with Keycloak, and the tokens of their Foyer sessions: sign-in by password grant, users
/// found by `sub` (or provisioned), access tokens refreshed before they expire (one refresh at a time per
/// session), Keycloak's session ended with Foyer's.
final class KeycloakSessions: Sendable {
    /// An access token this close to expiry is refreshed before it is relayed.
    static let refreshMargin: TimeInterval = 30

    let client: KeycloakClient
    let verifier: KeycloakTokenVerifier
    let store: Store
    let storage: any KeycloakStorage
    let users: any UserStorage
    let sessions: SessionRepository
    let trustProxy: Bool
    let logger: Logger
    private let refreshing = NIOLockedValueBox<[String: Task<String, any Error>]>([:])

    init(client: KeycloakClient, store: Store, sessions: SessionRepository, trustProxy: Bool, logger: Logger) {
        self.client = client
        verifier = KeycloakTokenVerifier(client: client)
        self.store = store
        self.storage = store.keycloakStorage
        self.users = store.userStorage
        self.sessions = sessions
        self.trustProxy = trustProxy
        self.logger = logger
    }

    /// The realm's user and tokens for a username (or email) and password; nil when Keycloak says they are wrong.
    func authenticate(username: String, password: String) async throws -> (User, KeycloakTokenSet)? {
        let tokens: KeycloakTokenSet
        do {
            tokens = try await client.passwordGrant(username: username, password: password)
        } catch KeycloakError.invalidGrant {
            return nil
        }
        return (try await user(signedInWith: tokens), tokens)
    }

    /// The user behind tokens Keycloak handed to us at its token endpoint.
    func user(signedInWith tokens: KeycloakTokenSet) async throws -> User {
        try await user(for: try await withUserinfo(tokens.claims, accessToken: tokens.accessToken))
    }

    /// The caller behind a Keycloak access token an app presents as Bearer: verified against the realm's keys,
    /// the user matched by `sub` (provisioned on first sight). AuthenticationRequired when the token is no good.
    func identity(forAccessToken token: String, request: Request) async throws -> Identity {
        do {
            let verified = try await verifier.verify(
                token, issuers: try await acceptedIssuers(for: request), use: .accessToken(audiences: client.settings.audiences)
            )
            let known = try await users.find(keycloakSubject: verified.subject)
            var claims = verified.claims
            if let known, claims["email"] as? String == nil || claims["email"] as? String == known.email {
                return Identity(user: known, keycloakToken: verified)
            }
            if known == nil { claims = try await withUserinfo(claims, accessToken: token) }
            return Identity(user: try await user(for: claims), keycloakToken: verified)
        } catch let rejected as TokenRejected {
            throw AuthenticationRequired(invalidToken: rejected.description)
        }
        // A KeycloakError (we could not check the token) goes on as it is: a 503 or 502, not the caller's fault.
    }

    /// The realm's issuer as Foyer discovered it, and as an app sees it through Foyer's `/realms/…` proxy
    /// (Keycloak names the forwarded host in the tokens it issues there).
    func acceptedIssuers(for request: Request) async throws -> Set<String> {
        let issuer = try await client.endpoints().issuer
        guard let path = URLComponents(string: issuer)?.path else { return [issuer] }
        return [issuer, request.publicOrigin(trustProxy: trustProxy) + path]
    }

    /// The caller's realm roles: from the token they presented, or from their session's access token, which came
    /// to us straight from the token endpoint.
    func realmRoles(of identity: Identity) async throws -> Set<String> {
        if let token = identity.keycloakToken { return token.realmRoles }
        guard let session = identity.session, let stored = try await tokens(ofSession: session.id) else { return [] }
        return VerifiedKeycloakToken.realmRoles(in: UnverifiedJWT.payload(stored.accessToken) ?? [:])
    }

    /// What Keycloak says about the caller: the claims of the token they presented, else of their session's ID
    /// token (or access token); nil for someone who did not sign in with Keycloak.
    func claims(of identity: Identity) async throws -> [String: Any]? {
        if let token = identity.keycloakToken { return token.claims }
        guard let session = identity.session, let stored = try await tokens(ofSession: session.id) else { return nil }
        return UnverifiedJWT.payload(stored.idToken ?? stored.accessToken)
    }

    /// Keycloak's tokens may leave the email out; userinfo has it. It must speak of the same subject
    /// (OpenID Connect Core §5.3.2), or it is not used.
    private func withUserinfo(_ claims: [String: Any], accessToken: String) async throws -> [String: Any] {
        guard claims["email"] == nil else { return claims }
        let info = try await client.userinfo(accessToken: accessToken)
        guard info["sub"] as? String == claims["sub"] as? String else { return claims }
        return claims.merging(info) { token, _ in token }
    }

    /// The Foyer user for a Keycloak identity: matched by `sub`; else a local account with the same *verified*
    /// email is linked; else a user is provisioned. The email follows Keycloak's when it changes there.
    func user(for claims: [String: Any]) async throws -> User {
        guard let subject = claims["sub"] as? String, !subject.isEmpty else {
            throw KeycloakError.unavailable("its tokens name no subject (sub)")
        }
        let claimedEmail = (claims["email"] as? String).map(User.normalize(email:))
        let emailVerified = claims["email_verified"] as? Bool ?? false
        let username = claims["preferred_username"] as? String ?? subject
        // Without an email claim the user still needs a unique one here: a name under the realm, never deliverable.
        let email = claimedEmail ?? "\(username)@\(client.settings.realm).keycloak.invalid"
        let user = try await users.keycloakUser(subject: subject, email: email, newEmail: claimedEmail) { local in
            local.keycloakSubject == nil && emailVerified
        }
        guard let user else {
            throw AppError(
                .conflict, title: "Account exists",
                message: "Another account already uses \(email); Keycloak has not verified that this address is yours"
            )
        }
        return user
    }

    func keep(_ tokens: KeycloakTokenSet, forSession sessionID: String, previousRefreshToken: String? = nil) async throws {
        // Straight from the token endpoint, so read without verifying; older Keycloaks say `session_state`.
        let claims = UnverifiedJWT.payload(tokens.idToken ?? tokens.accessToken) ?? [:]
        let record = KeycloakTokenRecord(
            sessionId: sessionID, accessToken: tokens.accessToken,
            // Keycloak may answer a refresh without a new refresh token: the old one stays good.
            refreshToken: tokens.refreshToken ?? previousRefreshToken, idToken: tokens.idToken,
            accessExpiresAt: Date().addingTimeInterval(TimeInterval(tokens.expiresIn)),
            keycloakSessionId: claims["sid"] as? String ?? claims["session_state"] as? String
        )
        try await storage.save(record)
    }

    /// One instance at a time refreshes a session's tokens; the others wait, then read the tokens it stored.
    /// (Keycloak answers or times out within 10 s, so a wait of twice that means something is wrong.)
    private func refreshAlone(_ identity: Identity, sessionID: String) async throws -> String {
        guard let token = try await store.exclusively("keycloak refresh \(sessionID)", waitingUpTo: .seconds(20), { try await self.refreshNow(identity) }) else {
            throw AppError(.serviceUnavailable, title: "Sign-in service busy", message: "Another instance is still renewing this sign-in. Try again in a moment.")
        }
        return token
    }

    /// The access token to relay for this session, refreshed first when it expires within `refreshMargin`;
    /// nil for a session that is not Keycloak's. Throws AuthenticationRequired when Keycloak ended the session.
    func accessToken(for identity: Identity) async throws -> String? {
        if let presented = identity.keycloakToken { return presented.raw }
        guard let sessionID = identity.session?.id, let stored = try await tokens(ofSession: sessionID) else { return nil }
        if stored.accessExpiresAt.timeIntervalSinceNow > Self.refreshMargin { return stored.accessToken }
        // Parallel refreshes with one refresh token fail at Keycloak ("Stale token"): all callers share one.
        let refresh = refreshing.withLockedValue { running in
            if let refresh = running[sessionID] { return refresh }
            // …and so do instances sharing a database: the others wait, then find the new tokens stored.
            let refresh = Task { try await self.refreshAlone(identity, sessionID: sessionID) }
            running[sessionID] = refresh
            return refresh
        }
        defer { refreshing.withLockedValue { if $0[sessionID] == refresh { $0[sessionID] = nil } } }
        return try await refresh.value
    }

    private func refreshNow(_ identity: Identity) async throws -> String {
        guard let sessionID = identity.session?.id, let stored = try await tokens(ofSession: sessionID) else { throw AuthenticationRequired() }
        // A refresh that finished just before this one started has done the work.
        if stored.accessExpiresAt.timeIntervalSinceNow > Self.refreshMargin { return stored.accessToken }
        do {
            guard let refreshToken = stored.refreshToken else { throw KeycloakError.invalidGrant("no refresh token was issued") }
            let tokens = try await client.refresh(refreshToken)
            try await keep(tokens, forSession: sessionID, previousRefreshToken: refreshToken)
            return tokens.accessToken
        } catch KeycloakError.invalidGrant(let reason) {
            logger.info("Keycloak ended a session", metadata: ["session": .string(sessionID), "reason": .string(reason)])
            try await forget(sessionID)
            _ = try await sessions.revoke(id: sessionID, userId: identity.userId)
            throw AuthenticationRequired()
        } catch let error as KeycloakError {
            // The session stays: Keycloak being away for a moment is not the user signing out.
            throw AppError(.serviceUnavailable, title: "Sign-in service unavailable", message: "\(error). Try again in a moment.")
        }
    }

    /// Ends the Keycloak session behind a Foyer session that is being revoked (back channel), and drops its tokens.
    /// Keycloak being unreachable does not keep anyone signed in to Foyer: that is logged, not thrown.
    func logout(session sessionID: String) async throws {
        guard let stored = try await tokens(ofSession: sessionID) else { return }
        try await forget(sessionID)
        guard let refreshToken = stored.refreshToken else { return }
        do {
            try await client.logout(refreshToken: refreshToken)
        } catch {
            logger.warning("Keycloak logout failed", metadata: ["session": .string(sessionID), "error": .string("\(error)")])
        }
    }

    /// Back-channel logout: Keycloak ended a session of its own (the user signed out elsewhere, or an admin ended
    /// it). Every Foyer session opened with that realm session ends too; with no `sid`, every session of `sub`.
    /// Nothing is sent back to Keycloak: its side is over already. Returns how many sessions ended.
    func endSessions(keycloakSession sid: String?, subject: String?) async throws -> Int {
        let ended = try await storage.sessions(keycloakSession: sid, subject: subject)
        for session in ended {
            try await forget(session.id)
            _ = try await sessions.revoke(id: session.id, userId: session.userId)
        }
        logger.info(
            "Keycloak ended sessions (back-channel logout)",
            metadata: ["sid": .string(sid ?? "-"), "sub": .string(subject ?? "-"), "ended": .stringConvertible(ended.count)]
        )
        return ended.count
    }

    func tokens(ofSession sessionID: String) async throws -> KeycloakTokenRecord? {
        try await storage.tokens(ofSession: sessionID)
    }

    private func forget(_ sessionID: String) async throws {
        try await storage.deleteTokens(ofSession: sessionID)
    }
}
