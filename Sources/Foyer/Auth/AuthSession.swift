import Foundation
import FoyerServer
import GRDB

/// One signed-in device: a browser, a native app, a curl script. The token itself is never stored.
public struct AuthSession: Codable, Sendable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "sessions"
    public static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    public static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    public var id: String
    public var userId: Int64
    public var tokenHash: String
    public var csrfToken: String
    public var userAgent: String?
    public var ipAddress: String?
    public var createdAt: Date
    public var lastSeenAt: Date
    public var revokedAt: Date?
    /// The RFC 7638 thumbprint of the key a native app proved at sign-in (DPoP): its token then works only with a
    /// fresh proof signed by that key. nil for a session signed in without one.
    public var dpopThumbprint: String?
    /// A bound session's WebView holds this other token's cookie (only ever good as a cookie), never the app's own.
    public var cookieTokenHash: String?

    /// Whether the session's token works only with a DPoP proof from the app's key.
    public var isBoundToDeviceKey: Bool { dpopThumbprint != nil }
}

extension AuthSession {
    /// Read by column name, as `Post` is: GRDB's Codable decoding (a decoder per row, each name converted from
    /// snake_case) was 37 µs of an account page.
    public init(row: Row) throws {
        id = row["id"]
        userId = row["user_id"]
        tokenHash = row["token_hash"]
        csrfToken = row["csrf_token"]
        userAgent = row["user_agent"]
        ipAddress = row["ip_address"]
        createdAt = row["created_at"]
        lastSeenAt = row["last_seen_at"]
        revokedAt = row["revoked_at"]
        dpopThumbprint = row["dpop_thumbprint"]
        cookieTokenHash = row["cookie_token_hash"]
    }
}

/// How long a session lasts: unused for `idleTimeout`, or older than `lifetime`, and it is over, like a revoked one.
public struct SessionLifetime: Sendable {
    public var idleTimeout: TimeInterval
    public var lifetime: TimeInterval

    public init(idleTimeout: TimeInterval = 30 * 86_400, lifetime: TimeInterval = 365 * 86_400) {
        self.idleTimeout = idleTimeout
        self.lifetime = lifetime
    }

    /// The cookie's Max-Age: the browser drops it when the session could no longer be alive anyway.
    var maximumAge: Int { Int(lifetime) }

    func isLive(_ session: AuthSession, now: Date) -> Bool {
        session.revokedAt == nil && now.timeIntervalSince(session.createdAt) < lifetime
            && now.timeIntervalSince(session.lastSeenAt) < idleTimeout
    }
}

/// Creates, finds and revokes sessions by their opaque tokens.
public struct SessionRepository: Sendable {
    /// Writing last_seen_at on every request would turn every read into a write: it moves at most this often, which
    /// is also how early an idle session may end (a tenth of the idle timeout at most).
    var lastSeenResolution: TimeInterval { min(SessionCache.lifetime, lifetime.idleTimeout / 10) }

    let storage: any SessionStorage
    let lifetime: SessionLifetime
    let cache = SessionCache()
    let ending: SessionEnding?
    /// Told of every revocation once it is stored: other instances drop their cached entries of it.
    let revoked: @Sendable (_ sessionID: String) -> Void
    /// Told when an account's row changed (its name, its address): other instances drop their cached sign-ins of it.
    let accountChanged: @Sendable (_ userID: Int64) -> Void

    init(
        store: Store, lifetime: SessionLifetime = SessionLifetime(), ending: SessionEnding? = nil,
        revoked: @escaping @Sendable (String) -> Void = { _ in }, accountChanged: @escaping @Sendable (Int64) -> Void = { _ in }
    ) {
        self.revoked = revoked
        self.accountChanged = accountChanged
        self.storage = store.sessionStorage(ending: ending)
        self.lifetime = lifetime
        self.ending = ending
    }

    public init(database: any DatabaseWriter, lifetime: SessionLifetime = SessionLifetime()) {
        self.init(store: .sqlite(database), lifetime: lifetime)
    }

    /// Returns the new session and its token; the token is shown to the client once and only its hash is kept.
    public func create(for user: User, userAgent: String?, ipAddress: String?) async throws -> (AuthSession, token: String) {
        let (session, token, _) = try await create(for: user, userAgent: userAgent, ipAddress: ipAddress, dpopThumbprint: nil)
        return (session, token)
    }

    /// A session bound to a device key (`dpopThumbprint`) also gets a token for its WebView's cookie: `cookieToken`
    /// (for an unbound one, the token itself).
    func create(
        for user: User, userAgent: String?, ipAddress: String?, dpopThumbprint: String?
    ) async throws -> (AuthSession, token: String, cookieToken: String) {
        guard let userId = user.id else { preconditionFailure("creating a session for an unsaved user") }
        let token = Self.randomToken()
        let cookieToken = dpopThumbprint == nil ? token : Self.randomToken()
        let now = Date()
        let session = AuthSession(
            id: UUID().uuidString.lowercased(),
            userId: userId,
            tokenHash: Self.hash(token: token),
            csrfToken: Self.randomToken(),
            userAgent: userAgent.map { String($0.prefix(512)) },
            ipAddress: ipAddress,
            createdAt: now,
            lastSeenAt: now,
            revokedAt: nil,
            dpopThumbprint: dpopThumbprint,
            cookieTokenHash: dpopThumbprint == nil ? nil : Self.hash(token: cookieToken)
        )
        try await storage.insert(session)
        return (session, token, cookieToken)
    }

    /// A new cookie token for a bound session's WebView (the one before it stops working): only its hash is kept,
    /// so a hand-over cannot give out the one it gave before.
    func renewCookieToken(of session: AuthSession) async throws -> String {
        precondition(session.isBoundToDeviceKey, "an unbound session's cookie holds its own token")
        let cookieToken = Self.randomToken()
        try await storage.setCookieTokenHash(Self.hash(token: cookieToken), sessionID: session.id)
        cache.forget(sessionID: session.id)
        return cookieToken
    }

    /// The live session and its user for a token; nil for unknown, revoked and expired tokens.
    public func find(token: String, now: Date = Date()) async throws -> (AuthSession, User)? {
        try await lookup(token: token, now: now).map { ($0.session, $0.user) }
    }

    /// A live session found by a token: its own, or (for a session bound to a device key) its WebView's cookie token.
    struct Found {
        let session: AuthSession
        let user: User
        /// The token is a bound session's cookie token: good only as the cookie.
        let isCookieToken: Bool
    }

    func lookup(token: String, now: Date = Date()) async throws -> Found? {
        guard token.utf8.count <= 256 else { return nil }
        // A cache hit does not move last_seen_at: once that is due, the database is asked (and it moves).
        if let cached = cache.lookup(token: token, now: now), lifetime.isLive(cached.session, now: now),
            now.timeIntervalSince(cached.session.lastSeenAt) <= lastSeenResolution
        {
            return cached
        }
        let tokenHash = Self.hash(token: token)
        let found = try await storage.find(tokenHash: tokenHash)
        guard let (foundSession, user) = found, lifetime.isLive(foundSession, now: now) else { return nil }
        var session = foundSession
        if now.timeIntervalSince(session.lastSeenAt) > lastSeenResolution {
            session.lastSeenAt = now
            try await storage.touch(sessionID: session.id, at: now)
        }
        let result = Found(session: session, user: user, isCookieToken: session.tokenHash != tokenHash)
        cache.store(result, token: token, now: now)
        return result
    }

    /// The user's live sessions, most recently used first.
    public func list(userId: Int64, now: Date = Date()) async throws -> [AuthSession] {
        try await storage.unrevoked(userId: userId).filter { lifetime.isLive($0, now: now) }
    }

    /// Deletes sessions that can no longer be used: revoked (an hour ago: signing out still reads the Keycloak tokens
    /// of the session it revoked), idle too long, or too old. Their Keycloak tokens go with them. Returns how many went.
    @discardableResult
    public func prune(now: Date = Date()) async throws -> Int {
        let pruned = try await storage.delete(
            revokedBefore: now.addingTimeInterval(-3600), lastSeenBefore: now.addingTimeInterval(-lifetime.idleTimeout),
            createdBefore: now.addingTimeInterval(-lifetime.lifetime)
        )
        if pruned > 0 { ending?.afterwards() }
        return pruned
    }

    /// Revokes one of the user's sessions; false when the user has no live session with that id.
    /// The account's row changed: its sessions are read again, here and on every other instance.
    func forgetCachedSignIns(of userID: Int64) {
        cache.forget(userID: userID)
        accountChanged(userID)
    }

    public func revoke(id: String, userId: Int64) async throws -> Bool {
        let revoked = try await storage.revoke(id: id, userId: userId, at: Date())
        if revoked {
            cache.forget(sessionID: id)
            self.revoked(id)
            ending?.afterwards()
        }
        return revoked
    }

    static func hash(token: String) -> String {
        token.sha256Hex
    }

    /// What `randomToken` makes: 43 characters of `A-Z a-z 0-9 - _`.
    static func looksLikeSessionToken(_ token: String) -> Bool {
        token.utf8.count == 43 && token.utf8.allSatisfy(Base64URL.isAlphabet)
    }

    /// 256 random bits, base64url without padding: safe in a header, a cookie and a URL.
    static func randomToken() -> String {
        Base64URL.randomToken(bytes: 32)
    }
}
