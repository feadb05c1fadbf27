import Foundation
import GRDB
import NIOCore
import PostgresNIO

/// Rows of `idempotency_keys`: (caller, key) → the request's fingerprint, and once it answered, the answer.
protocol IdempotencyStorage: Sendable {
    /// Takes the key for a request unless a live row holds it (an expired one, or a first request that never answered
    /// since `now - abandonedAfter`, is taken over); otherwise says what holds it.
    func claim(caller: Int64, key: String, fingerprint: String, now: Date) async throws -> IdempotencyClaim
    /// The claimed key's answer, kept until `expiresAt`.
    func keep(_ answer: KeptAnswer, caller: Int64, key: String, expiresAt: Date) async throws
    /// The claimed key is free again: its request answered nothing worth keeping.
    func release(caller: Int64, key: String) async throws
    func deleteExpired(before: Date, abandonedBefore: Date) async throws -> Int
}

extension IdempotencyStorage {
    /// What a row found in place of a claim means for a request with `fingerprint`.
    static func holding(fingerprint: String, row: (fingerprint: String, status: Int?, headers: String?, body: ByteBuffer?)) -> IdempotencyClaim {
        guard row.fingerprint == fingerprint else { return .otherRequest }
        guard let status = row.status else { return .running }
        return .answered(KeptAnswer(status: status, headers: KeptAnswer.decodeHeaders(row.headers ?? "[]"), body: row.body ?? ByteBuffer()))
    }
}

struct SQLiteIdempotencyStorage: IdempotencyStorage {
    let database: any DatabaseWriter

    func claim(caller: Int64, key: String, fingerprint: String, now: Date) async throws -> IdempotencyClaim {
        try await database.write { db in
            try db.execute(sql: """
                INSERT INTO idempotency_keys (caller, key, fingerprint, started_at, expires_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (caller, key) DO UPDATE SET
                    fingerprint = excluded.fingerprint, started_at = excluded.started_at, expires_at = excluded.expires_at,
                    status = NULL, headers = NULL, body = NULL
                WHERE idempotency_keys.expires_at <= ? OR (idempotency_keys.status IS NULL AND idempotency_keys.started_at <= ?)
                """, arguments: [caller, key, fingerprint, now, now.addingTimeInterval(IdempotencyKeys.lifetime), now,
                                 now.addingTimeInterval(-IdempotencyKeys.abandonedAfter)])
            if db.changesCount > 0 { return .claimed }
            guard let row = try Row.fetchOne(
                db, sql: "SELECT fingerprint, status, headers, body FROM idempotency_keys WHERE caller = ? AND key = ?", arguments: [caller, key]
            ) else { return .claimed }
            let body = (row["body"] as Data?).map { ByteBuffer(bytes: $0) }
            return Self.holding(fingerprint: fingerprint, row: (row["fingerprint"], row["status"], row["headers"], body))
        }
    }

    func keep(_ answer: KeptAnswer, caller: Int64, key: String, expiresAt: Date) async throws {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE idempotency_keys SET status = ?, headers = ?, body = ?, expires_at = ? WHERE caller = ? AND key = ? AND status IS NULL",
                arguments: [answer.status, answer.encodedHeaders, Data(answer.body.readableBytesView), expiresAt, caller, key]
            )
        }
    }

    func release(caller: Int64, key: String) async throws {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM idempotency_keys WHERE caller = ? AND key = ? AND status IS NULL", arguments: [caller, key])
        }
    }

    func deleteExpired(before date: Date, abandonedBefore: Date) async throws -> Int {
        try await database.write { db in
            try db.execute(
                sql: "DELETE FROM idempotency_keys WHERE expires_at <= ? OR (status IS NULL AND started_at <= ?)", arguments: [date, abandonedBefore]
            )
            return db.changesCount
        }
    }
}

/// One statement claims a key on every instance at once: the primary key decides which request is first.
struct PostgresIdempotencyStorage: IdempotencyStorage {
    let store: PostgresStore

    func claim(caller: Int64, key: String, fingerprint: String, now: Date) async throws -> IdempotencyClaim {
        let (expires, abandoned) = (now.addingTimeInterval(IdempotencyKeys.lifetime), now.addingTimeInterval(-IdempotencyKeys.abandonedAfter))
        let claimed = try await store.query("""
            INSERT INTO idempotency_keys (caller, key, fingerprint, started_at, expires_at) VALUES (\(caller), \(key), \(fingerprint), \(now), \(expires))
            ON CONFLICT (caller, key) DO UPDATE SET
                fingerprint = excluded.fingerprint, started_at = excluded.started_at, expires_at = excluded.expires_at,
                status = NULL, headers = NULL, body = NULL
            WHERE idempotency_keys.expires_at <= \(now) OR (idempotency_keys.status IS NULL AND idempotency_keys.started_at <= \(abandoned))
            RETURNING caller
            """)
        if !claimed.isEmpty { return .claimed }
        guard let row = try await store.query(
            "SELECT fingerprint, status, headers, body FROM idempotency_keys WHERE caller = \(caller) AND key = \(key)"
        ).first else {
            // Pruned between the two statements: it expired, so it is free.
            return try await claim(caller: caller, key: key, fingerprint: fingerprint, now: now)
        }
        let (storedFingerprint, status, headers, body) = try row.decode((String, Int?, String?, ByteBuffer?).self)
        return Self.holding(fingerprint: fingerprint, row: (storedFingerprint, status, headers, body))
    }

    func keep(_ answer: KeptAnswer, caller: Int64, key: String, expiresAt: Date) async throws {
        try await store.query("""
            UPDATE idempotency_keys SET status = \(answer.status), headers = \(answer.encodedHeaders), body = \(answer.body), expires_at = \(expiresAt)
            WHERE caller = \(caller) AND key = \(key) AND status IS NULL
            """)
    }

    func release(caller: Int64, key: String) async throws {
        try await store.query("DELETE FROM idempotency_keys WHERE caller = \(caller) AND key = \(key) AND status IS NULL")
    }

    func deleteExpired(before date: Date, abandonedBefore: Date) async throws -> Int {
        try await store.query("""
            DELETE FROM idempotency_keys WHERE expires_at <= \(date) OR (status IS NULL AND started_at <= \(abandonedBefore)) RETURNING caller
            """).count
    }
}
