import Foundation
import GRDB
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

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
    /// `issuedAt`: a proof's `iat` (see SQLiteSpentCredentialStorage for why it matters there).
    func spend(_ kind: Kind, scope: String, identifier: String, issuedAt: Date? = nil, expiresAt: Date, now: Date = Date()) async throws -> Bool {
        // A hash: identifiers come from clients (any length, any bytes) and a whole ID token is never stored.
        let key = "\(kind.rawValue) \(scope) \(identifier)".sha256Hex
        // A proof spent on every request of a bound session may stay in the memory of the one instance SQLite has;
        // one dated ahead of our clock may not (a restart's rule would not cover it), nor may anything else.
        let inMemory = kind == .dpopProof && (issuedAt.map { $0 <= now.addingTimeInterval(1) } ?? false)
        return try await storage.spend(key: key, issuedAt: issuedAt ?? now, expiresAt: expiresAt, now: now, atOnce: !inMemory)
    }

    /// Deletes what has expired.
    @discardableResult
    func prune(now: Date = Date()) async throws -> Int {
        try await storage.deleteExpired(before: now)
    }

    /// Stores what only memory knows, at shutdown, so that the next start knows it too.
    func stop(now: Date = Date()) async throws {
        try await storage.stop(at: now)
    }
}

extension Pruning {
    /// Spent credentials once they have expired, every minute: a bound app spends one per request, and they live a
    /// minute or two, so an hourly sweep would let the table grow to an hour of requests. At shutdown, stores what
    /// only memory knows.
    static func spentCredentials(_ spent: SpentCredentials, logger: Logger) -> Pruning {
        Pruning(what: "spent credentials", interval: .seconds(60), logger: logger, prune: { try await spent.prune() }, atShutdown: { try await spent.stop() })
    }
}

protocol SpentCredentialStorage: Sendable {
    /// Records `key` until `expiresAt` unless it is recorded and not expired at `now`; true when it recorded it.
    /// `atOnce`: stored before this returns; otherwise a store may keep it in memory until `stop`.
    func spend(key: String, issuedAt: Date, expiresAt: Date, now: Date, atOnce: Bool) async throws -> Bool
    /// Deletes what expired by `before`; how many were deleted.
    func deleteExpired(before: Date) async throws -> Int
    /// Stores what only memory knows (a graceful shutdown).
    func stop(at: Date) async throws
}

/// SQLite is one instance's store, so that instance's memory knows every proof it took: a bound session's request
/// costs no write (a write of its own per request halved its throughput; writing them in batches still cost 10 µs a
/// row and 10–25 ms p99 on this machine). What memory knows goes to the table at a graceful shutdown, with a mark that
/// says so, and the next start reads it back. After a crash there is no mark: then a proof made before the start is
/// refused (those the crash forgot among them), and proofs dated ahead of our clock, which that rule would not
/// cover, are written as they are taken. An app whose clock is behind ours by a few seconds has its proofs refused for
/// that long after a crash, and makes new ones.
final class SQLiteSpentCredentialStorage: SpentCredentialStorage {
    /// The key of the mark a graceful shutdown leaves (not a SHA-256 hex, so no credential's).
    static let cleanStopMark = "stopped cleanly"

    private struct Memory {
        var live: [String: Date]
        /// Set after a crash: proofs issued before it are refused.
        let issuedNoEarlierThan: Date?
    }

    private let database: any DatabaseWriter
    private let memory: NIOLockedValueBox<Memory>

    init(database: any DatabaseWriter) {
        self.database = database
        let now = Date()
        let (live, stoppedCleanly) = (try? database.write { db -> ([String: Date], Bool) in
            let rows = try Row.fetchAll(db, sql: "SELECT key, expires_at FROM spent_credentials WHERE expires_at > ?", arguments: [now])
            var live: [String: Date] = [:]
            for row in rows { live[row["key"]] = row["expires_at"] }
            let mark = live.removeValue(forKey: Self.cleanStopMark)
            try db.execute(sql: "DELETE FROM spent_credentials WHERE key = ?", arguments: [Self.cleanStopMark])
            return (live, mark != nil)
        }) ?? ([:], false)
        // A proof's iat is in whole seconds: one made in the second of the start is not made before it.
        let startSecond = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        memory = NIOLockedValueBox(Memory(live: live, issuedNoEarlierThan: stoppedCleanly ? nil : startSecond))
    }

    func spend(key: String, issuedAt: Date, expiresAt: Date, now: Date, atOnce: Bool) async throws -> Bool {
        if atOnce {
            let spent = try await database.write { db in
                try Self.insert(db, key: key, expiresAt: expiresAt, now: now)
                return db.changesCount > 0
            }
            if spent { memory.withLockedValue { $0.live[key] = expiresAt } }
            return spent
        }
        return memory.withLockedValue { memory in
            if let earliest = memory.issuedNoEarlierThan, issuedAt < earliest { return false }
            if let until = memory.live[key], until > now { return false }
            memory.live[key] = expiresAt
            return true
        }
    }

    /// One statement: an expired row (not yet pruned) is taken over, a live one is left as it is.
    private static func insert(_ db: Database, key: String, expiresAt: Date, now: Date) throws {
        try db.cachedStatement(sql: """
            INSERT INTO spent_credentials (key, expires_at) VALUES (?, ?)
            ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE spent_credentials.expires_at <= ?
            """).execute(arguments: [key, expiresAt, now])
    }

    func deleteExpired(before date: Date) async throws -> Int {
        memory.withLockedValue { $0.live = $0.live.filter { $0.value > date } }
        return try await database.write { db in
            try db.execute(sql: "DELETE FROM spent_credentials WHERE expires_at <= ?", arguments: [date])
            return db.changesCount
        }
    }

    func stop(at now: Date) async throws {
        let live = memory.withLockedValue { $0.live.filter { $0.value > now } }
        try await database.write { db in
            for (key, expiresAt) in live { try Self.insert(db, key: key, expiresAt: expiresAt, now: now) }
            // The mark outlives every proof it vouches for: a start after that needs no vouching.
            try Self.insert(db, key: Self.cleanStopMark, expiresAt: now.addingTimeInterval(2 * DPoPVerifier.window), now: now)
        }
    }
}

/// Every spend is a statement another instance sees at once. Spends that arrive while one statement is under way go
/// together in the next: a bound session spends one per request, and with many apps at once (-c16 here) that ran
/// 1.5x the rate of a statement each.
final class PostgresSpentCredentialStorage: SpentCredentialStorage {
    private struct Waiting {
        let key: String
        let expiresAt: Date
        let now: Date
        let spent: CheckedContinuation<Bool, any Error>
    }

    private struct Queue {
        var waiting: [Waiting] = []
        var running = false
    }

    private let store: PostgresStore
    private let queue = NIOLockedValueBox(Queue())

    init(store: PostgresStore) {
        self.store = store
    }

    /// Always at once: another instance may be asked about the same key the next moment.
    func spend(key: String, issuedAt: Date, expiresAt: Date, now: Date, atOnce: Bool) async throws -> Bool {
        try await withCheckedThrowingContinuation { spent in
            let starts = queue.withLockedValue { queue in
                queue.waiting.append(Waiting(key: key, expiresAt: expiresAt, now: now, spent: spent))
                defer { queue.running = true }
                return !queue.running
            }
            if starts { Task { await self.run() } }
        }
    }

    /// Statements one after another, each with every spend that waited for the one before, until none wait.
    private func run() async {
        while true {
            let batch = queue.withLockedValue { queue in
                defer { queue.waiting.removeAll() }
                if queue.waiting.isEmpty { queue.running = false }
                return queue.waiting
            }
            guard !batch.isEmpty else { return }
            do {
                // The same key twice in one batch: the first one spends it (one statement cannot touch a row twice).
                var (keys, expiresAts, named) = ([String](), [Date](), Set<String>())
                for waiting in batch where named.insert(waiting.key).inserted {
                    keys.append(waiting.key)
                    expiresAts.append(waiting.expiresAt)
                }
                // The batch's moment: its latest (they came within one statement's time of each other).
                let now = batch.map(\.now).max() ?? Date()
                let inserted = Set(try await store.execute(SpendAll(keys: keys, expiresAts: expiresAts, now: now)))
                var answered: Set<String> = []
                for waiting in batch {
                    waiting.spent.resume(returning: inserted.contains(waiting.key) && answered.insert(waiting.key).inserted)
                }
            } catch {
                for waiting in batch { waiting.spent.resume(throwing: error) }
            }
        }
    }

    /// Prepared once per connection. Two instances spending one key at once: the unique key lets one insert, the
    /// other waits and finds it live.
    private struct SpendAll: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO spent_credentials (key, expires_at) SELECT * FROM unnest($1::text[], $2::timestamptz[])
            ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE spent_credentials.expires_at <= $3
            RETURNING key
            """
        let keys: [String]
        let expiresAts: [Date]
        let now: Date

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(keys)
            bindings.append(expiresAts)
            bindings.append(now)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> String {
            try row.decode(String.self)
        }
    }

    func deleteExpired(before date: Date) async throws -> Int {
        try await store.query("DELETE FROM spent_credentials WHERE expires_at <= \(date) RETURNING key").count
    }

    /// Everything is stored already.
    func stop(at: Date) async throws {}
}
