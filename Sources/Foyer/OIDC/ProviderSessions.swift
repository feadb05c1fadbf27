import Foundation
import GRDB
import Hummingbird
import Logging
import NIOConcurrencyHelpers

/// A Foyer session's tokens from the provider it signed in with: kept server-side, never sent to the browser or
/// the app. (The table keeps the name it had when Keycloak was the only provider.)
struct ProviderTokenRecord: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "keycloak_tokens"
    static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    var sessionId: String
    /// Empty for a native ID-token sign-in: the app holds the provider's access token, Foyer only its ID token.
    var accessToken: String
    var refreshToken: String?
    var idToken: String?
    var accessExpiresAt: Date
    /// The provider's session (`sid`): what a back-channel logout names.
    var keycloakSessionId: String?
    /// `ProviderSettings.name` of the provider the session signed in with.
    var provider: String
}

/// Users who sign in with one provider, and the tokens of their Foyer sessions: sign-in by code, password grant
/// or a native app's ID token, users found by `sub` (or provisioned), access tokens refreshed before they expire
/// (one refresh at a time per session), the provider's session ended with Foyer's.
final class ProviderSessions: Sendable {
    /// An access token this close to expiry is refreshed before it is relayed.
    static let refreshMargin: TimeInterval = 30
    /// What introspection said of an opaque access token is believed this long (or until the token expires).
    static let introspectionLifetime: TimeInterval = 60

    let client: ProviderClient
    let verifier: TokenVerifier
    let store: Store
    let storage: any ProviderStorage
    let users: any UserStorage
    let sessions: SessionRepository
    let trustProxy: Bool
    /// The same verified email through another provider is the same Foyer user.
    let linkVerifiedEmail: Bool
    let logger: Logger
    private let refreshing = NIOLockedValueBox<[String: Task<String, any Error>]>([:])
    /// Opaque access tokens by SHA-256: their subject and claims while active, nil while refused.
    private let introspected = StartOverCache<String, (claims: Data?, until: Date)>(maximumCost: 10_000)

    init(client: ProviderClient, store: Store, sessions: SessionRepository, trustProxy: Bool, linkVerifiedEmail: Bool, logger: Logger) {
        self.client = client
        verifier = TokenVerifier(client: client)
        self.store = store
        self.storage = store.providerStorage
        self.users = store.userStorage
        self.sessions = sessions
        self.trustProxy = trustProxy
        self.linkVerifiedEmail = linkVerifiedEmail
        self.logger = logger
    }

    var settings: ProviderSettings { client.settings }
    var name: String { client.settings.name }

    /// The provider's user and tokens for a username (or email) and password; nil when the provider says they are wrong.
    func authenticate(username: String, password: String) async throws -> (User, ProviderTokenSet)? {
        let tokens: ProviderTokenSet
        do {
            tokens = try await client.passwordGrant(username: username, password: password)
        } catch let error as ProviderError where error.kind == .invalidGrant {
            return nil
        }
        return (try await user(signedInWith: tokens), tokens)
    }

    /// The user behind tokens the provider handed to us at its token endpoint.
    func user(signedInWith tokens: ProviderTokenSet) async throws -> User {
        try await user(for: try await withUserinfo(tokens.claims, accessToken: tokens.accessToken))
    }

    /// A native app's sign-in with the ID token the provider gave it: verified against the provider's keys, for one
    /// of the app clients, with the app's nonce, and spent (`singleUse`) before anyone is provisioned. TokenRejected
    /// says why not.
    func user(signedInWithIDToken idToken: String, nonce: String?, singleUse: SingleUseIDTokens) async throws -> (User, VerifiedToken) {
        guard !settings.appClientIDs.isEmpty else {
            throw TokenRejected("\(settings.displayName) accepts no app's ID tokens here: the operator names them with --oidc-app-client-ids")
        }
        let verified = try await verifier.verify(
            idToken, issuers: [try await client.endpoints().issuer], use: .appIDToken(clientIDs: settings.appClientIDs, nonce: nonce)
        )
        try await singleUse.spend(verified)
        return (try await user(for: verified.claims), verified)
    }

    /// The caller behind an access token an app presents as Bearer: a JWT verified against the provider's keys, or
    /// an opaque token its introspection calls active for us; the user matched by `sub` (provisioned on first
    /// sight). AuthenticationRequired when the token is no good.
    func identity(forAccessToken token: String, request: Request) async throws -> Identity {
        do {
            let verified = try await verifier.verify(
                token, issuers: try await acceptedIssuers(for: request), use: .accessToken(audiences: settings.audiences)
            )
            return try await identity(for: verified, accessToken: token)
        } catch let rejected as TokenRejected {
            throw AuthenticationRequired(invalidToken: rejected.description)
        }
        // A ProviderError (we could not check the token) goes on as it is: a 503 or 502, not the caller's fault.
    }

    /// An opaque access token, by RFC 7662 introspection: nil when this provider does not know it (or cannot say).
    func identity(forOpaqueAccessToken token: String) async throws -> Identity? {
        let key = token.sha256Hex
        var cached = introspected.value(for: key)
        if cached.map({ $0.until <= Date() }) ?? true {
            cached = try await introspect(token)
            if let cached { introspected.keep(cached, for: key) }
        }
        guard let claimsData = cached?.claims, let until = cached?.until,
            let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any], let subject = claims["sub"] as? String
        else { return nil }
        let verified = VerifiedToken(provider: name, raw: token, subject: subject, expiresAt: until, payload: claimsData)
        return try await identity(for: verified, accessToken: token)
    }

    private func introspect(_ token: String) async throws -> (claims: Data?, until: Date)? {
        guard let answer = try await client.introspect(token) else { return nil }
        let refused = (claims: Data?.none, until: Date().addingTimeInterval(Self.introspectionLifetime))
        guard answer["active"] as? Bool == true, answer["sub"] is String else { return refused }
        // Meant for us: our client, or one of the accepted audiences, named in `aud` or `client_id`.
        let audiences = (answer["aud"] as? [String]) ?? (answer["aud"] as? String).map { [$0] } ?? []
        let named = Set(audiences + [answer["client_id"] as? String].compactMap { $0 })
        guard !named.isDisjoint(with: settings.audiences) else { return refused }
        if let type = answer["token_type"] as? String, type.lowercased() != "bearer", type.lowercased() != "access_token" { return refused }
        let expires = (answer["exp"] as? Double).map { Date(timeIntervalSince1970: $0) } ?? .distantFuture
        let until = min(expires, Date().addingTimeInterval(Self.introspectionLifetime))
        guard until > Date() else { return refused }
        return (try JSONSerialization.data(withJSONObject: answer), until)
    }

    private func identity(for verified: VerifiedToken, accessToken: String) async throws -> Identity {
        var claims = verified.claims
        let known = try await users.find(provider: name, subject: verified.subject)
        if let known, claims["email"] as? String == nil || claims["email"] as? String == known.email {
            return Identity(user: known, providerToken: verified)
        }
        if known == nil { claims = try await withUserinfo(claims, accessToken: accessToken) }
        return Identity(user: try await user(for: claims), providerToken: verified)
    }

    /// The issuer as Foyer discovered it, and for Keycloak as an app sees it through Foyer's `/realms/…` proxy
    /// (Keycloak names the forwarded host in the tokens it issues there).
    func acceptedIssuers(for request: Request) async throws -> Set<String> {
        let issuer = try await client.endpoints().issuer
        guard settings.issuerThroughProxy, let path = URLComponents(string: issuer)?.path else { return [issuer] }
        return [issuer, request.publicOrigin(trustProxy: trustProxy) + path]
    }

    /// Tokens may leave the email out; userinfo has it. It must speak of the same subject
    /// (OpenID Connect Core §5.3.2), or it is not used.
    private func withUserinfo(_ claims: [String: Any], accessToken: String) async throws -> [String: Any] {
        guard claims["email"] == nil, !accessToken.isEmpty else { return claims }
        let info = try await client.userinfo(accessToken: accessToken)
        guard info["sub"] as? String == claims["sub"] as? String else { return claims }
        return claims.merging(info) { token, _ in token }
    }

    /// The Foyer user for a provider identity: matched by provider and `sub`; else a local account with the same
    /// *verified* email is linked (and, with `--oidc-link-verified-email`, another provider's user); else a user is
    /// provisioned. The email follows the provider's when it changes there.
    func user(for claims: [String: Any]) async throws -> User {
        guard let subject = claims["sub"] as? String, !subject.isEmpty else {
            throw client.failure("its tokens name no subject (sub)")
        }
        let claimedEmail = (claims["email"] as? String).map(User.normalize(email:))
        // Some providers (Django's, for one) write the flag as a string.
        let emailVerified = claims["email_verified"] as? Bool ?? ((claims["email_verified"] as? String) == "true")
        let username = claims["preferred_username"] as? String ?? subject
        // Without an email claim the user still needs a unique one here: a name under the provider, never deliverable.
        let placeholder = "\(username)@\(settings.placeholderEmailDomain)"
        let linkOtherProviders = linkVerifiedEmail
        let displayName = Self.displayName(claims: claims, email: claimedEmail ?? placeholder)
        let user = try await users.providerUser(
            provider: name, subject: subject, email: claimedEmail ?? placeholder, newEmail: claimedEmail,
            separateEmail: "\(subject)@\(settings.placeholderEmailDomain)", name: displayName, emailVerified: emailVerified && claimedEmail != nil
        ) { _, hasIdentities in
            emailVerified && (!hasIdentities || linkOtherProviders)
        }
        guard let user else {
            throw AppError(
                .conflict, title: "Account exists",
                message: "Another account already uses \(claimedEmail ?? placeholder); \(settings.displayName) has not verified that this address is yours"
            )
        }
        return user
    }

    /// What a new account from a provider is called: its `name` claim, else `preferred_username`, else the part of the
    /// address before `@`.
    static func displayName(claims: [String: Any], email: String) -> String {
        for claim in ["name", "preferred_username"] {
            if let value = (claims[claim] as? String)?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty {
                return String(value.prefix(User.maximumNameLength))
            }
        }
        return User.defaultName(email: email)
    }

    func keep(_ tokens: ProviderTokenSet, forSession sessionID: String, previousRefreshToken: String? = nil) async throws {
        // Straight from the token endpoint, so read without verifying; older Keycloaks say `session_state`.
        let claims = UnverifiedJWT.payload(tokens.idToken ?? tokens.accessToken) ?? [:]
        let record = ProviderTokenRecord(
            sessionId: sessionID, accessToken: tokens.accessToken,
            // A refresh may be answered without a new refresh token: the old one stays good.
            refreshToken: tokens.refreshToken ?? previousRefreshToken, idToken: tokens.idToken,
            accessExpiresAt: Date().addingTimeInterval(TimeInterval(tokens.expiresIn)),
            keycloakSessionId: claims["sid"] as? String ?? claims["session_state"] as? String, provider: name
        )
        try await storage.save(record)
    }

    /// A native ID-token sign-in keeps the verified ID token (its claims, its `sid` for back-channel logout); there
    /// is no access token of ours to relay or refresh.
    func keep(idToken verified: VerifiedToken, forSession sessionID: String) async throws {
        let record = ProviderTokenRecord(
            sessionId: sessionID, accessToken: "", refreshToken: nil, idToken: verified.raw, accessExpiresAt: verified.expiresAt,
            keycloakSessionId: verified.claims["sid"] as? String, provider: name
        )
        try await storage.save(record)
    }

    /// One instance at a time refreshes a session's tokens; the others wait, then read the tokens it stored.
    /// (The provider answers or times out within 10 s, so a wait of twice that means something is wrong.)
    private func refreshAlone(_ identity: Identity, sessionID: String) async throws -> String {
        guard let token = try await store.exclusively("keycloak refresh \(sessionID)", waitingUpTo: .seconds(20), { try await self.refreshNow(identity) }) else {
            throw AppError(.serviceUnavailable, title: Phrase("providers.errors.busy.title"), message: Phrase("providers.errors.busy"))
        }
        return token
    }

    /// The access token to relay for a session of this provider, refreshed first when it expires within
    /// `refreshMargin`. Throws AuthenticationRequired when the provider ended the session.
    func accessToken(for identity: Identity, stored: ProviderTokenRecord) async throws -> String? {
        guard !stored.accessToken.isEmpty, let sessionID = identity.session?.id else { return nil }
        if stored.accessExpiresAt.timeIntervalSinceNow > Self.refreshMargin { return stored.accessToken }
        // Parallel refreshes with one refresh token fail at the provider ("Stale token"): all callers share one.
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
        guard let sessionID = identity.session?.id, let stored = try await storage.tokens(ofSession: sessionID) else { throw AuthenticationRequired() }
        // A refresh that finished just before this one started has done the work.
        if stored.accessExpiresAt.timeIntervalSinceNow > Self.refreshMargin { return stored.accessToken }
        do {
            guard let refreshToken = stored.refreshToken else { throw client.failure("no refresh token was issued", kind: .invalidGrant) }
            let tokens = try await client.refresh(refreshToken)
            try await keep(tokens, forSession: sessionID, previousRefreshToken: refreshToken)
            return tokens.accessToken
        } catch let error as ProviderError where error.kind == .invalidGrant {
            logger.info("\(settings.displayName) ended a session", metadata: ["session": .string(sessionID), "reason": .string(error.reason)])
            try await forget(sessionID)
            _ = try await sessions.revoke(id: sessionID, userId: identity.userId)
            throw AuthenticationRequired()
        } catch let error as ProviderError {
            // The session stays: the provider being away for a moment is not the user signing out.
            throw AppError(.serviceUnavailable, title: Phrase("providers.errors.unavailable.title"), message: Phrase("providers.errors.unavailable", ["why": "\(error)"]))
        }
    }

    /// Ends the provider's session behind a Foyer session that is being revoked (back channel), and drops its
    /// tokens. The provider being unreachable does not keep anyone signed in to Foyer: that is logged, not thrown.
    func logout(session sessionID: String, stored: ProviderTokenRecord) async throws {
        try await forget(sessionID)
        guard let refreshToken = stored.refreshToken else { return }
        do {
            try await client.logout(refreshToken: refreshToken)
        } catch {
            logger.warning("\(settings.displayName) logout failed", metadata: ["session": .string(sessionID), "error": .string("\(error)")])
        }
    }

    /// Back-channel logout: the provider ended a session of its own (the user signed out elsewhere, an admin ended
    /// it). Every Foyer session opened with that provider session ends too; with no `sid`, every session of `sub`.
    /// Nothing is sent back: the provider's side is over already. Returns how many sessions ended.
    func endSessions(providerSession sid: String?, subject: String?) async throws -> Int {
        let ended = try await storage.sessions(provider: name, providerSession: sid, subject: subject)
        for session in ended {
            try await forget(session.id)
            _ = try await sessions.revoke(id: session.id, userId: session.userId)
        }
        logger.info(
            "\(settings.displayName) ended sessions (back-channel logout)",
            metadata: ["sid": .string(sid ?? "-"), "sub": .string(subject ?? "-"), "ended": .stringConvertible(ended.count)]
        )
        return ended.count
    }

    private func forget(_ sessionID: String) async throws {
        try await storage.deleteTokens(ofSession: sessionID)
    }
}
