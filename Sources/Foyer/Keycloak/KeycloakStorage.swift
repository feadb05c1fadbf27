import Foundation
import GRDB
import PostgresNIO

/// The rows behind `KeycloakSessions` (tokens of Foyer sessions) and browser sign-ins under way.
protocol KeycloakStorage: Sendable {
    func save(_ tokens: KeycloakTokenRecord) async throws
    func tokens(ofSession sessionID: String) async throws -> KeycloakTokenRecord?
    func deleteTokens(ofSession sessionID: String) async throws
    /// Unrevoked Foyer sessions opened with the realm session `sid` (of `subject`, when given), or with no `sid`
    /// every unrevoked session of `subject`.
    func sessions(keycloakSession sid: String?, subject: String?) async throws -> [(id: String, userId: Int64)]

    /// Stores a browser sign-in attempt; abandoned ones older than `lifetime` go.
    func insert(_ attempt: KeycloakSignInAttempt, droppingOlderThan: Date) async throws
    /// Removes and returns the attempt: each is used once.
    func take(state: String) async throws -> KeycloakSignInAttempt?
}

extension Store {
    var keycloakStorage: any KeycloakStorage { choose(sqlite: SQLiteKeycloakStorage.init, postgres: PostgresKeycloakStorage.init) }
}

struct SQLiteKeycloakStorage: KeycloakStorage {
    let database: any DatabaseWriter

    func save(_ tokens: KeycloakTokenRecord) async throws {
        try await database.write { db in try tokens.save(db) }
    }

    func tokens(ofSession sessionID: String) async throws -> KeycloakTokenRecord? {
        try database.readStatementNow { db in try KeycloakTokenRecord.fetchOne(db, key: sessionID) }
    }

    func deleteTokens(ofSession sessionID: String) async throws {
        _ = try await database.write { db in try KeycloakTokenRecord.deleteOne(db, key: sessionID) }
    }

    func sessions(keycloakSession sid: String?, subject: String?) async throws -> [(id: String, userId: Int64)] {
        try database.readNow { db in
            let rows: [Row]
            if let sid, !sid.isEmpty {
                var sql = "SELECT s.id, s.user_id FROM sessions s JOIN keycloak_tokens k ON k.session_id = s.id WHERE k.keycloak_session_id = ? AND s.revoked_at IS NULL"
                var arguments: StatementArguments = [sid]
                if let subject, !subject.isEmpty {
                    sql += " AND s.user_id IN (SELECT id FROM users WHERE keycloak_subject = ?)"
                    arguments += [subject]
                }
                rows = try Row.fetchAll(db, sql: sql, arguments: arguments)
            } else if let subject, !subject.isEmpty {
                rows = try Row.fetchAll(
                    db,
                    sql: "SELECT s.id, s.user_id FROM sessions s JOIN users u ON u.id = s.user_id WHERE u.keycloak_subject = ? AND s.revoked_at IS NULL",
                    arguments: [subject]
                )
            } else {
                rows = []
            }
            return rows.map { ($0["id"], $0["user_id"]) }
        }
    }

    func insert(_ attempt: KeycloakSignInAttempt, droppingOlderThan date: Date) async throws {
        try await database.write { db in
            try KeycloakSignInAttempt.filter(Column("created_at") < date).deleteAll(db)
            try attempt.insert(db)
        }
    }

    func take(state: String) async throws -> KeycloakSignInAttempt? {
        try await database.write { db in
            guard let attempt = try KeycloakSignInAttempt.fetchOne(db, key: state) else { return nil }
            try attempt.delete(db)
            return attempt
        }
    }
}

struct PostgresKeycloakStorage: KeycloakStorage {
    let store: PostgresStore

    func save(_ tokens: KeycloakTokenRecord) async throws {
        try await store.query("""
            INSERT INTO keycloak_tokens (session_id, access_token, refresh_token, id_token, access_expires_at, keycloak_session_id)
            VALUES (\(tokens.sessionId), \(tokens.accessToken), \(tokens.refreshToken), \(tokens.idToken), \(tokens.accessExpiresAt),
            \(tokens.keycloakSessionId))
            ON CONFLICT (session_id) DO UPDATE SET access_token = excluded.access_token, refresh_token = excluded.refresh_token,
            id_token = excluded.id_token, access_expires_at = excluded.access_expires_at, keycloak_session_id = excluded.keycloak_session_id
            """)
    }

    func tokens(ofSession sessionID: String) async throws -> KeycloakTokenRecord? {
        try await store.query("SELECT * FROM keycloak_tokens WHERE session_id = \(sessionID)").first.map { row in
            try row.makeRandomAccess().decode(KeycloakTokenRecord.self)
        }
    }

    func deleteTokens(ofSession sessionID: String) async throws {
        try await store.query("DELETE FROM keycloak_tokens WHERE session_id = \(sessionID)")
    }

    func sessions(keycloakSession sid: String?, subject: String?) async throws -> [(id: String, userId: Int64)] {
        let subject = subject?.isEmpty == false ? subject : nil
        let rows: [PostgresRow]
        if let sid, !sid.isEmpty {
            rows = try await store.query("""
                SELECT s.id, s.user_id FROM sessions s JOIN keycloak_tokens k ON k.session_id = s.id
                WHERE k.keycloak_session_id = \(sid) AND s.revoked_at IS NULL
                AND (\(subject)::text IS NULL OR s.user_id IN (SELECT id FROM users WHERE keycloak_subject = \(subject)))
                """)
        } else if let subject {
            rows = try await store.query("""
                SELECT s.id, s.user_id FROM sessions s JOIN users u ON u.id = s.user_id
                WHERE u.keycloak_subject = \(subject) AND s.revoked_at IS NULL
                """)
        } else {
            rows = []
        }
        return try rows.map { try $0.decode((String, Int64).self) }
    }

    func insert(_ attempt: KeycloakSignInAttempt, droppingOlderThan date: Date) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            try await connection.run("DELETE FROM keycloak_sign_ins WHERE created_at < \(date)", logger: logger)
            try await connection.run("""
                INSERT INTO keycloak_sign_ins (state, code_verifier, nonce, redirect_uri, return_to, created_at)
                VALUES (\(attempt.state), \(attempt.codeVerifier), \(attempt.nonce), \(attempt.redirectUri), \(attempt.returnTo), \(attempt.createdAt))
                """, logger: logger)
        }
    }

    func take(state: String) async throws -> KeycloakSignInAttempt? {
        try await store.query("DELETE FROM keycloak_sign_ins WHERE state = \(state) RETURNING *").first.map { row in
            try row.makeRandomAccess().decode(KeycloakSignInAttempt.self)
        }
    }
}
