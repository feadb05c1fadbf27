import Foundation
import GRDB
import PostgresNIO

/// The rows behind `ProviderSessions` (tokens of Foyer sessions) and browser sign-ins under way.
protocol ProviderStorage: Sendable {
    func save(_ tokens: ProviderTokenRecord) async throws
    func tokens(ofSession sessionID: String) async throws -> ProviderTokenRecord?
    func deleteTokens(ofSession sessionID: String) async throws
    /// Unrevoked Foyer sessions of `provider` opened with its session `sid` (of `subject`, when given), or with no
    /// `sid` every unrevoked session of `subject` there.
    func sessions(provider: String, providerSession sid: String?, subject: String?) async throws -> [(id: String, userId: Int64)]

    /// Stores a browser sign-in attempt; abandoned ones older than `lifetime` go.
    func insert(_ attempt: BrowserSignInAttempt, droppingOlderThan: Date) async throws
    /// Removes and returns the attempt: each is used once.
    func take(state: String) async throws -> BrowserSignInAttempt?
}

extension Store {
    var providerStorage: any ProviderStorage { choose(sqlite: SQLiteProviderStorage.init, postgres: PostgresProviderStorage.init) }
}

struct SQLiteProviderStorage: ProviderStorage {
    let database: any DatabaseWriter

    func save(_ tokens: ProviderTokenRecord) async throws {
        try await database.write { db in try tokens.save(db) }
    }

    func tokens(ofSession sessionID: String) async throws -> ProviderTokenRecord? {
        try database.readStatementNow { db in try ProviderTokenRecord.fetchOne(db, key: sessionID) }
    }

    func deleteTokens(ofSession sessionID: String) async throws {
        _ = try await database.write { db in try ProviderTokenRecord.deleteOne(db, key: sessionID) }
    }

    func sessions(provider: String, providerSession sid: String?, subject: String?) async throws -> [(id: String, userId: Int64)] {
        try database.readNow { db in
            let rows: [Row]
            let sessionsOfProvider = "SELECT s.id, s.user_id FROM sessions s JOIN keycloak_tokens k ON k.session_id = s.id WHERE k.provider = ? AND s.revoked_at IS NULL"
            let ofSubject = " AND s.user_id IN (SELECT user_id FROM user_identities WHERE provider = ? AND subject = ?)"
            if let sid, !sid.isEmpty {
                var sql = sessionsOfProvider + " AND k.keycloak_session_id = ?"
                var arguments: StatementArguments = [provider, sid]
                if let subject, !subject.isEmpty {
                    sql += ofSubject
                    arguments += [provider, subject]
                }
                rows = try Row.fetchAll(db, sql: sql, arguments: arguments)
            } else if let subject, !subject.isEmpty {
                rows = try Row.fetchAll(db, sql: sessionsOfProvider + ofSubject, arguments: [provider, provider, subject])
            } else {
                rows = []
            }
            return rows.map { ($0["id"], $0["user_id"]) }
        }
    }

    func insert(_ attempt: BrowserSignInAttempt, droppingOlderThan date: Date) async throws {
        try await database.write { db in
            try BrowserSignInAttempt.filter(Column("created_at") < date).deleteAll(db)
            try attempt.insert(db)
        }
    }

    func take(state: String) async throws -> BrowserSignInAttempt? {
        try await database.write { db in
            guard let attempt = try BrowserSignInAttempt.fetchOne(db, key: state) else { return nil }
            try attempt.delete(db)
            return attempt
        }
    }
}

struct PostgresProviderStorage: ProviderStorage {
    let store: PostgresStore

    func save(_ tokens: ProviderTokenRecord) async throws {
        try await store.query("""
            INSERT INTO keycloak_tokens (session_id, access_token, refresh_token, id_token, access_expires_at, keycloak_session_id, provider)
            VALUES (\(tokens.sessionId), \(tokens.accessToken), \(tokens.refreshToken), \(tokens.idToken), \(tokens.accessExpiresAt),
            \(tokens.keycloakSessionId), \(tokens.provider))
            ON CONFLICT (session_id) DO UPDATE SET access_token = excluded.access_token, refresh_token = excluded.refresh_token,
            id_token = excluded.id_token, access_expires_at = excluded.access_expires_at, keycloak_session_id = excluded.keycloak_session_id,
            provider = excluded.provider
            """)
    }

    func tokens(ofSession sessionID: String) async throws -> ProviderTokenRecord? {
        try await store.query("SELECT * FROM keycloak_tokens WHERE session_id = \(sessionID)").first.map { row in
            try row.makeRandomAccess().decode(ProviderTokenRecord.self)
        }
    }

    func deleteTokens(ofSession sessionID: String) async throws {
        try await store.query("DELETE FROM keycloak_tokens WHERE session_id = \(sessionID)")
    }

    func sessions(provider: String, providerSession sid: String?, subject: String?) async throws -> [(id: String, userId: Int64)] {
        let subject = subject?.isEmpty == false ? subject : nil
        let rows: [PostgresRow]
        if let sid, !sid.isEmpty {
            rows = try await store.query("""
                SELECT s.id, s.user_id FROM sessions s JOIN keycloak_tokens k ON k.session_id = s.id
                WHERE k.provider = \(provider) AND k.keycloak_session_id = \(sid) AND s.revoked_at IS NULL
                AND (\(subject)::text IS NULL OR s.user_id IN (SELECT user_id FROM user_identities WHERE provider = \(provider) AND subject = \(subject)))
                """)
        } else if let subject {
            rows = try await store.query("""
                SELECT s.id, s.user_id FROM sessions s JOIN keycloak_tokens k ON k.session_id = s.id
                WHERE k.provider = \(provider) AND s.revoked_at IS NULL
                AND s.user_id IN (SELECT user_id FROM user_identities WHERE provider = \(provider) AND subject = \(subject))
                """)
        } else {
            rows = []
        }
        return try rows.map { try $0.decode((String, Int64).self) }
    }

    func insert(_ attempt: BrowserSignInAttempt, droppingOlderThan date: Date) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            try await connection.run("DELETE FROM keycloak_sign_ins WHERE created_at < \(date)", logger: logger)
            try await connection.run("""
                INSERT INTO keycloak_sign_ins (state, code_verifier, nonce, redirect_uri, return_to, created_at, provider)
                VALUES (\(attempt.state), \(attempt.codeVerifier), \(attempt.nonce), \(attempt.redirectUri), \(attempt.returnTo), \(attempt.createdAt),
                \(attempt.provider))
                """, logger: logger)
        }
    }

    func take(state: String) async throws -> BrowserSignInAttempt? {
        try await store.query("DELETE FROM keycloak_sign_ins WHERE state = \(state) RETURNING *").first.map { row in
            try row.makeRandomAccess().decode(BrowserSignInAttempt.self)
        }
    }
}
