import Foundation
import GRDB
import PostgresNIO

/// A passkey as its owner sees it on the account page and in `GET /api/v1/passkeys`.
struct Passkey: Sendable, Equatable {
    /// The credential id, base64url.
    let id: String
    let userId: Int64
    var name: String
    /// The COSE key, base64url.
    let publicKey: String
    var signCount: Int64
    let backupEligible: Bool
    var backedUp: Bool
    let createdAt: Date
    var lastUsedAt: Date?
}

/// What a ceremony's options promised, kept until its response comes (once) or five minutes pass.
struct PasskeyChallenge: Sendable {
    enum Ceremony: String, Sendable { case registration, authentication }
    let ceremony: Ceremony
    /// The account adding a passkey; nil when signing in (no address asked).
    let userId: Int64?
    let expiresAt: Date
}

protocol PasskeyStorage: Sendable {
    /// The account's WebAuthn user handle (random, never its address), made on first use.
    func userHandle(of userId: Int64, making new: String) async throws -> String
    func user(withHandle handle: String) async throws -> Int64?
    func keepChallenge(_ challenge: String, _ kept: PasskeyChallenge) async throws
    /// The challenge, once: a second take finds nothing.
    func takeChallenge(_ challenge: String) async throws -> PasskeyChallenge?
    /// False when the credential id is registered already (to anyone).
    func insert(_ passkey: Passkey) async throws -> Bool
    func passkey(id: String) async throws -> Passkey?
    func passkeys(of userId: Int64) async throws -> [Passkey]
    /// After a sign-in: the new counter and backup state, and when. False when another sign-in moved the counter first.
    func used(_ id: String, signCount: Int64, previous: Int64, backedUp: Bool, at date: Date) async throws -> Bool
    func rename(_ id: String, of userId: Int64, to name: String) async throws -> Bool
    func delete(_ id: String, of userId: Int64) async throws -> Bool
    func deleteExpiredChallenges(before date: Date) async throws -> Int
}

extension Store {
    var passkeyStorage: any PasskeyStorage { choose(sqlite: SQLitePasskeyStorage.init, postgres: PostgresPasskeyStorage.init) }
}

struct SQLitePasskeyStorage: PasskeyStorage {
    let database: any DatabaseWriter

    func userHandle(of userId: Int64, making new: String) async throws -> String {
        try await database.write { db in
            try db.execute(sql: "INSERT INTO passkey_users (user_id, handle) VALUES (?, ?) ON CONFLICT DO NOTHING", arguments: [userId, new])
            return try String.fetchOne(db, sql: "SELECT handle FROM passkey_users WHERE user_id = ?", arguments: [userId]) ?? new
        }
    }

    func user(withHandle handle: String) async throws -> Int64? {
        try database.readNow { try Int64.fetchOne($0, sql: "SELECT user_id FROM passkey_users WHERE handle = ?", arguments: [handle]) }
    }

    func keepChallenge(_ challenge: String, _ kept: PasskeyChallenge) async throws {
        try await database.write { db in
            try db.execute(
                sql: "INSERT INTO passkey_challenges (challenge, ceremony, user_id, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [challenge, kept.ceremony.rawValue, kept.userId, kept.expiresAt]
            )
        }
    }

    func takeChallenge(_ challenge: String) async throws -> PasskeyChallenge? {
        try await database.write { db in
            try Row.fetchOne(db, sql: "DELETE FROM passkey_challenges WHERE challenge = ? RETURNING ceremony, user_id, expires_at", arguments: [challenge])
                .flatMap { row in
                    PasskeyChallenge.Ceremony(rawValue: row["ceremony"]).map { PasskeyChallenge(ceremony: $0, userId: row["user_id"], expiresAt: row["expires_at"]) }
                }
        }
    }

    func insert(_ passkey: Passkey) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: """
                INSERT INTO passkeys (id, user_id, name, public_key, sign_count, backup_eligible, backed_up, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                """, arguments: [
                    passkey.id, passkey.userId, passkey.name, passkey.publicKey, passkey.signCount, passkey.backupEligible, passkey.backedUp,
                    passkey.createdAt,
                ])
            return db.changesCount > 0
        }
    }

    func passkey(id: String) async throws -> Passkey? {
        try database.readNow { try Row.fetchOne($0, sql: "SELECT * FROM passkeys WHERE id = ?", arguments: [id]).map(Self.passkey) }
    }

    func passkeys(of userId: Int64) async throws -> [Passkey] {
        try database.readNow { db in
            try Row.fetchAll(db, sql: "SELECT * FROM passkeys WHERE user_id = ? ORDER BY created_at, id", arguments: [userId]).map(Self.passkey)
        }
    }

    func used(_ id: String, signCount: Int64, previous: Int64, backedUp: Bool, at date: Date) async throws -> Bool {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE passkeys SET sign_count = ?, backed_up = ?, last_used_at = ? WHERE id = ? AND sign_count = ?",
                arguments: [signCount, backedUp, date, id, previous]
            )
            return db.changesCount > 0
        }
    }

    func rename(_ id: String, of userId: Int64, to name: String) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "UPDATE passkeys SET name = ? WHERE id = ? AND user_id = ?", arguments: [name, id, userId])
            return db.changesCount > 0
        }
    }

    func delete(_ id: String, of userId: Int64) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM passkeys WHERE id = ? AND user_id = ?", arguments: [id, userId])
            return db.changesCount > 0
        }
    }

    func deleteExpiredChallenges(before date: Date) async throws -> Int {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM passkey_challenges WHERE expires_at < ?", arguments: [date])
            return db.changesCount
        }
    }

    private static func passkey(_ row: Row) -> Passkey {
        Passkey(
            id: row["id"], userId: row["user_id"], name: row["name"], publicKey: row["public_key"], signCount: row["sign_count"],
            backupEligible: row["backup_eligible"], backedUp: row["backed_up"], createdAt: row["created_at"], lastUsedAt: row["last_used_at"]
        )
    }
}

struct PostgresPasskeyStorage: PasskeyStorage {
    let store: PostgresStore

    func userHandle(of userId: Int64, making new: String) async throws -> String {
        _ = try await store.query("INSERT INTO passkey_users (user_id, handle) VALUES (\(userId), \(new)) ON CONFLICT DO NOTHING")
        return try await store.query("SELECT handle FROM passkey_users WHERE user_id = \(userId)").first?.decode(String.self) ?? new
    }

    func user(withHandle handle: String) async throws -> Int64? {
        try await store.query("SELECT user_id FROM passkey_users WHERE handle = \(handle)").first?.decode(Int64.self)
    }

    func keepChallenge(_ challenge: String, _ kept: PasskeyChallenge) async throws {
        _ = try await store.query("""
            INSERT INTO passkey_challenges (challenge, ceremony, user_id, expires_at)
            VALUES (\(challenge), \(kept.ceremony.rawValue), \(kept.userId), \(kept.expiresAt))
            """)
    }

    func takeChallenge(_ challenge: String) async throws -> PasskeyChallenge? {
        guard let row = try await store.query("""
            DELETE FROM passkey_challenges WHERE challenge = \(challenge) RETURNING ceremony, user_id, expires_at
            """).first else { return nil }
        let (ceremony, userId, expiresAt) = try row.decode((String, Int64?, Date).self)
        return PasskeyChallenge.Ceremony(rawValue: ceremony).map { PasskeyChallenge(ceremony: $0, userId: userId, expiresAt: expiresAt) }
    }

    func insert(_ passkey: Passkey) async throws -> Bool {
        try await !store.query("""
            INSERT INTO passkeys (id, user_id, name, public_key, sign_count, backup_eligible, backed_up, created_at)
            VALUES (\(passkey.id), \(passkey.userId), \(passkey.name), \(passkey.publicKey), \(passkey.signCount), \(passkey.backupEligible),
                    \(passkey.backedUp), \(passkey.createdAt))
            ON CONFLICT DO NOTHING RETURNING id
            """).isEmpty
    }

    private static let columns = "id, user_id, name, public_key, sign_count, backup_eligible, backed_up, created_at, last_used_at"

    func passkey(id: String) async throws -> Passkey? {
        try await store.query("SELECT \(unescaped: Self.columns) FROM passkeys WHERE id = \(id)").first.map(Self.passkey)
    }

    func passkeys(of userId: Int64) async throws -> [Passkey] {
        try await store.query("SELECT \(unescaped: Self.columns) FROM passkeys WHERE user_id = \(userId) ORDER BY created_at, id").map(Self.passkey)
    }

    func used(_ id: String, signCount: Int64, previous: Int64, backedUp: Bool, at date: Date) async throws -> Bool {
        try await !store.query("""
            UPDATE passkeys SET sign_count = \(signCount), backed_up = \(backedUp), last_used_at = \(date)
            WHERE id = \(id) AND sign_count = \(previous) RETURNING id
            """).isEmpty
    }

    func rename(_ id: String, of userId: Int64, to name: String) async throws -> Bool {
        try await !store.query("UPDATE passkeys SET name = \(name) WHERE id = \(id) AND user_id = \(userId) RETURNING id").isEmpty
    }

    func delete(_ id: String, of userId: Int64) async throws -> Bool {
        try await !store.query("DELETE FROM passkeys WHERE id = \(id) AND user_id = \(userId) RETURNING id").isEmpty
    }

    func deleteExpiredChallenges(before date: Date) async throws -> Int {
        try await store.query("DELETE FROM passkey_challenges WHERE expires_at < \(date) RETURNING challenge").count
    }

    private static func passkey(_ row: PostgresRow) throws -> Passkey {
        let (id, userId, name, publicKey, signCount, eligible, backedUp, createdAt, lastUsedAt) = try row.decode(
            (String, Int64, String, String, Int64, Bool, Bool, Date, Date?).self
        )
        return Passkey(
            id: id, userId: userId, name: name, publicKey: publicKey, signCount: signCount, backupEligible: eligible, backedUp: backedUp,
            createdAt: createdAt, lastUsedAt: lastUsedAt
        )
    }
}
