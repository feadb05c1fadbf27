import Foundation
import GRDB
import PostgresNIO

/// Credentials good for one use: a native app's ID token and its nonce (traded for one session), a DPoP proof's
/// `jti` (one request). Kept in the store until they would have expired anyway, so every instance on one PostgreSQL
/// refuses what another accepted.
struct SpentCredentials: Sendable {
    enum Kind: String {
        case idToken = "id_token"
        case nonce
        case dpopProof = "dpop"
    }

    let storage: any SpentCredentialStorage

    init(store: Store) {
        storage = store.choose(sqlite: SQLiteSpentCredentialStorage.init, postgres: PostgresSpentCredentialStorage.init)
    }

    /// True the first time (the credential is now spent until `expiresAt`); false when it was spent already.
    /// `scope` says whose it is (a provider's name, a key's thumbprint): one issuer's identifier is not another's.
    func spend(_ kind: Kind, scope: String, identifier: String, expiresAt: Date, now: Date = Date()) async throws -> Bool {
        // A hash: identifiers come from clients (any length, any bytes) and a whole ID token is never stored.
        let key = "\(kind.rawValue) \(scope) \(identifier)".sha256Hex
        return try await storage.spend(key: key, expiresAt: expiresAt, now: now)
    }

    @discardableResult
    func prune(now: Date = Date()) async throws -> Int {
        try await storage.deleteExpired(before: now)
    }
}

protocol SpentCredentialStorage: Sendable {
    /// Records `key` until `expiresAt` unless it is recorded and not expired at `now`; true when it recorded it.
    func spend(key: String, expiresAt: Date, now: Date) async throws -> Bool
    func deleteExpired(before: Date) async throws -> Int
}

struct SQLiteSpentCredentialStorage: SpentCredentialStorage {
    let database: any DatabaseWriter

    func spend(key: String, expiresAt: Date, now: Date) async throws -> Bool {
        try await database.write { db in
            // One statement: an expired row (not yet pruned) is taken over, a live one is left as it is.
            try db.execute(
                sql: """
                    INSERT INTO spent_credentials (key, expires_at) VALUES (?, ?)
                    ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE spent_credentials.expires_at <= ?
                    """,
                arguments: [key, expiresAt, now]
            )
            return db.changesCount > 0
        }
    }

    func deleteExpired(before date: Date) async throws -> Int {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM spent_credentials WHERE expires_at <= ?", arguments: [date])
            return db.changesCount
        }
    }
}

struct PostgresSpentCredentialStorage: SpentCredentialStorage {
    let store: PostgresStore

    func spend(key: String, expiresAt: Date, now: Date) async throws -> Bool {
        // Two instances spending one key at once: the unique key lets one insert, the other waits and finds it live.
        try await !store.query("""
            INSERT INTO spent_credentials (key, expires_at) VALUES (\(key), \(expiresAt))
            ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE spent_credentials.expires_at <= \(now)
            RETURNING key
            """).isEmpty
    }

    func deleteExpired(before date: Date) async throws -> Int {
        try await store.query("DELETE FROM spent_credentials WHERE expires_at <= \(date) RETURNING key").count
    }
}
