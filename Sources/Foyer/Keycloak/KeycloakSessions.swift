import Foundation
import GRDB
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
}

/// Users who sign in with Keycloak, and the tokens of their Foyer sessions: sign-in by password grant, users
/// found by `sub` (or provisioned), access tokens refreshed before they expire (one refresh at a time per
/// session), Keycloak's session ended with Foyer's.
final class KeycloakSessions: Sendable {
    /// An access token this close to expiry is refreshed before it is relayed.
    static let refreshMargin: TimeInterval = 30

    let client: KeycloakClient
    let database: any DatabaseWriter
    let sessions: SessionStore
    let logger: Logger
    private let refreshing = NIOLockedValueBox<[String: Task<String, any Error>]>([:])

    init(client: KeycloakClient, database: any DatabaseWriter, sessions: SessionStore, logger: Logger) {
        self.client = client
        self.database = database
        self.sessions = sessions
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
        var claims = tokens.claims
        if claims["email"] == nil {
            // userinfo must speak of the same subject (OpenID Connect Core §5.3.2), or it is not used.
            let info = try await client.userinfo(accessToken: tokens.accessToken)
            if info["sub"] as? String == claims["sub"] as? String { claims.merge(info) { token, _ in token } }
        }
        return (try await user(for: claims), tokens)
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
        return try await database.write { db in
            if var user = try User.filter(Column("keycloak_subject") == subject).fetchOne(db) {
                let taken = try User.filter(Column("email") == email && Column("id") != user.id).fetchCount(db) > 0
                if user.email != email, !taken {
                    user.email = email
                    try user.update(db)
                }
                return user
            }
            if var local = try User.filter(Column("email") == email).fetchOne(db) {
                guard local.keycloakSubject == nil, emailVerified else {
                    throw AppError(
                        .conflict, title: "Account exists",
                        message: "Another account already uses \(email); Keycloak has not verified that this address is yours"
                    )
                }
                local.keycloakSubject = subject
                try local.update(db)
                return local
            }
            var user = User(id: nil, email: email, passwordHash: User.noLocalPassword, createdAt: Date(), keycloakSubject: subject)
            try user.insert(db)
            return user
        }
    }

    func keep(_ tokens: KeycloakTokenSet, forSession sessionID: String, previousRefreshToken: String? = nil) async throws {
        let record = KeycloakTokenRecord(
            sessionId: sessionID, accessToken: tokens.accessToken,
            // Keycloak may answer a refresh without a new refresh token: the old one stays good.
            refreshToken: tokens.refreshToken ?? previousRefreshToken, idToken: tokens.idToken,
            accessExpiresAt: Date().addingTimeInterval(TimeInterval(tokens.expiresIn))
        )
        try await database.write { db in try record.save(db) }
    }

    /// The access token to relay for this session, refreshed first when it expires within `refreshMargin`;
    /// nil for a session that is not Keycloak's. Throws AuthenticationRequired when Keycloak ended the session.
    func accessToken(for identity: Identity) async throws -> String? {
        let sessionID = identity.session.id
        guard let stored = try await tokens(ofSession: sessionID) else { return nil }
        if stored.accessExpiresAt.timeIntervalSinceNow > Self.refreshMargin { return stored.accessToken }
        // Parallel refreshes with one refresh token fail at Keycloak ("Stale token"): all callers share one.
        let refresh = refreshing.withLockedValue { running in
            if let refresh = running[sessionID] { return refresh }
            let refresh = Task { try await self.refreshNow(identity) }
            running[sessionID] = refresh
            return refresh
        }
        defer { refreshing.withLockedValue { if $0[sessionID] == refresh { $0[sessionID] = nil } } }
        return try await refresh.value
    }

    private func refreshNow(_ identity: Identity) async throws -> String {
        let sessionID = identity.session.id
        guard let stored = try await tokens(ofSession: sessionID) else { throw AuthenticationRequired() }
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

    func tokens(ofSession sessionID: String) async throws -> KeycloakTokenRecord? {
        try await database.read { db in try KeycloakTokenRecord.fetchOne(db, key: sessionID) }
    }

    private func forget(_ sessionID: String) async throws {
        _ = try await database.write { db in try KeycloakTokenRecord.deleteOne(db, key: sessionID) }
    }
}
