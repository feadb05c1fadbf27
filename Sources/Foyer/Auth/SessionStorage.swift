import Foundation
import GRDB
import PostgresNIO

/// The rows behind `SessionRepository`.
protocol SessionStorage: Sendable {
    func insert(_ session: AuthSession) async throws
    /// The unrevoked session with that token hash (its own, or its WebView's cookie token's), and its user.
    func find(tokenHash: String) async throws -> (AuthSession, User)?
    func setCookieTokenHash(_ hash: String, sessionID: String) async throws
    func touch(sessionID: String, at: Date) async throws
    /// The user's unrevoked sessions, most recently used first.
    func unrevoked(userId: Int64) async throws -> [AuthSession]
    /// Deletes sessions revoked, last seen or created before these dates (with `ending` in the same transaction).
    func delete(revokedBefore: Date, lastSeenBefore: Date, createdBefore: Date) async throws -> Int
    /// Marks one of the user's unrevoked sessions revoked (with `ending` in the same transaction).
    func revoke(id: String, userId: Int64, at: Date) async throws -> Bool
}

/// What must end with a session (its devices' push registrations), done in the transaction that ends it, so
/// a crash cannot leave half of it done; `afterwards` runs once that transaction is committed.
struct SessionEnding: Sendable {
    let sqlite: @Sendable (Database, _ sessionIDs: [String]) throws -> Void
    let postgres: @Sendable (PostgresConnection, _ sessionIDs: [String]) async throws -> Void
    let afterwards: @Sendable () -> Void
}

extension Store {
    func sessionStorage(ending: SessionEnding?) -> any SessionStorage {
        switch self {
        case .sqlite(let database): SQLiteSessionStorage(database: database, ending: ending?.sqlite)
        case .postgres(let store): PostgresSessionStorage(store: store, ending: ending?.postgres)
        }
    }
}

struct SQLiteSessionStorage: SessionStorage {
    let database: any DatabaseWriter
    let ending: (@Sendable (Database, [String]) throws -> Void)?

    func insert(_ session: AuthSession) async throws {
        try await database.write { db in try session.insert(db) }
    }

    func find(tokenHash: String) async throws -> (AuthSession, User)? {
        // Kept statements: the query interface compiled both on every sign-in a session cache did not hold.
        try database.readNow { db in
            let sessions = try db.cachedStatement(
                sql: "SELECT * FROM sessions WHERE (token_hash = ? OR cookie_token_hash = ?) AND revoked_at IS NULL LIMIT 1"
            )
            guard let session = try AuthSession.fetchOne(sessions, arguments: [tokenHash, tokenHash]),
                let user = try SQLiteUserStorage.user(id: session.userId, db)
            else { return nil }
            return (session, user)
        }
    }

    func setCookieTokenHash(_ hash: String, sessionID: String) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE sessions SET cookie_token_hash = ? WHERE id = ?", arguments: [hash, sessionID])
        }
    }

    func touch(sessionID: String, at date: Date) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE sessions SET last_seen_at = ? WHERE id = ?", arguments: [date, sessionID])
        }
    }

    func unrevoked(userId: Int64) async throws -> [AuthSession] {
        // A statement kept prepared: the query interface compiles its SQL on every call (half this read's cost on
        // the account page).
        try database.readNow { db in
            try AuthSession.fetchAll(
                db.cachedStatement(sql: "SELECT * FROM sessions WHERE user_id = ? AND revoked_at IS NULL ORDER BY last_seen_at DESC, created_at DESC"),
                arguments: [userId]
            )
        }
    }

    func delete(revokedBefore: Date, lastSeenBefore: Date, createdBefore: Date) async throws -> Int {
        let ending = ending
        return try await database.write { db in
            let condition = "revoked_at <= ? OR last_seen_at <= ? OR created_at <= ?"
            let arguments: StatementArguments = [revokedBefore, lastSeenBefore, createdBefore]
            if let ending {
                try ending(db, try String.fetchAll(db, sql: "SELECT id FROM sessions WHERE \(condition)", arguments: arguments))
            }
            try db.execute(sql: "DELETE FROM sessions WHERE \(condition)", arguments: arguments)
            return db.changesCount
        }
    }

    func revoke(id: String, userId: Int64, at date: Date) async throws -> Bool {
        let ending = ending
        return try await database.write { db in
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL",
                arguments: [date, id, userId]
            )
            guard db.changesCount > 0 else { return false }
            try ending?(db, [id])
            return true
        }
    }
}

struct PostgresSessionStorage: SessionStorage {
    let store: PostgresStore
    let ending: (@Sendable (PostgresConnection, [String]) async throws -> Void)?

    private static let columns = """
        id, user_id, token_hash, csrf_token, user_agent, ip_address, created_at, last_seen_at, revoked_at, dpop_thumbprint, cookie_token_hash
        """

    func insert(_ session: AuthSession) async throws {
        try await store.query("""
            INSERT INTO sessions (\(unescaped: Self.columns)) VALUES (\(session.id), \(session.userId), \(session.tokenHash),
            \(session.csrfToken), \(session.userAgent), \(session.ipAddress), \(session.createdAt), \(session.lastSeenAt), \(session.revokedAt),
            \(session.dpopThumbprint), \(session.cookieTokenHash))
            """)
    }

    func setCookieTokenHash(_ hash: String, sessionID: String) async throws {
        try await store.query("UPDATE sessions SET cookie_token_hash = \(hash) WHERE id = \(sessionID)")
    }

    func find(tokenHash: String) async throws -> (AuthSession, User)? {
        let rows = try await store.query("""
            SELECT sessions.*, \(unescaped: PostgresUsers.columns(as: "user_")) FROM sessions JOIN users ON users.id = sessions.user_id
            WHERE (sessions.token_hash = \(tokenHash) OR sessions.cookie_token_hash = \(tokenHash)) AND sessions.revoked_at IS NULL
            """)
        return try rows.first.map { row in
            let columns = row.makeRandomAccess()
            return (try Self.session(columns), try PostgresUsers.user(columns, prefix: "user_"))
        }
    }

    func touch(sessionID: String, at date: Date) async throws {
        try await store.query("UPDATE sessions SET last_seen_at = \(date) WHERE id = \(sessionID)")
    }

    func unrevoked(userId: Int64) async throws -> [AuthSession] {
        try await store.query("""
            SELECT \(unescaped: Self.columns) FROM sessions WHERE user_id = \(userId) AND revoked_at IS NULL
            ORDER BY last_seen_at DESC, created_at DESC
            """).map { try Self.session($0.makeRandomAccess()) }
    }

    func delete(revokedBefore: Date, lastSeenBefore: Date, createdBefore: Date) async throws -> Int {
        let (ending, logger) = (ending, store.logger)
        return try await store.transaction { connection in
            let ids = try await connection.run("""
                SELECT id FROM sessions WHERE revoked_at <= \(revokedBefore) OR last_seen_at <= \(lastSeenBefore)
                OR created_at <= \(createdBefore) FOR UPDATE
                """, logger: logger).map { try $0.decode(String.self) }
            guard !ids.isEmpty else { return 0 }
            try await ending?(connection, ids)
            try await connection.run("DELETE FROM sessions WHERE id = ANY(\(ids))", logger: logger)
            return ids.count
        }
    }

    func revoke(id: String, userId: Int64, at date: Date) async throws -> Bool {
        let (ending, logger) = (ending, store.logger)
        return try await store.transaction { connection in
            let revoked = try await connection.run("""
                UPDATE sessions SET revoked_at = \(date) WHERE id = \(id) AND user_id = \(userId) AND revoked_at IS NULL
                RETURNING id
                """, logger: logger)
            guard !revoked.isEmpty else { return false }
            try await ending?(connection, [id])
            return true
        }
    }

    private static func session(_ row: PostgresRandomAccessRow) throws -> AuthSession {
        try row.decode(AuthSession.self)
    }
}
