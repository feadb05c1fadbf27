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

        /// Written before the answer. A proof's jti, spent on every request of a bound session, may be written a moment
        /// later where one instance holds the store (SQLite): that instance knows it in memory meanwhile.
        var isWrittenAtOnce: Bool { self != .dpopProof }
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
        return try await storage.spend(key: key, expiresAt: expiresAt, now: now, atOnce: kind.isWrittenAtOnce)
    }

    /// Writes what is still to be written and deletes what has expired.
    @discardableResult
    func prune(now: Date = Date()) async throws -> Int {
        try await storage.deleteExpired(before: now)
    }
}

/// Drops spent credentials once they have expired, every minute: a bound app spends one per request, and they live
/// two minutes, so an hourly sweep would let the table grow to an hour of requests. Once more at shutdown, so a
/// restart (a deploy) reads back every proof taken.
struct SpentCredentialPruning: Service {
    static let interval: Duration = .seconds(60)
    let spent: SpentCredentials
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await spent.prune()
                } catch {
                    logger.error("pruning spent credentials failed: \(error)")
                }
                try? await Task.sleep(for: Self.interval)
            }
        }
        do {
            try await spent.prune()
        } catch {
            logger.error("writing spent credentials at shutdown failed: \(error)")
        }
    }
}

protocol SpentCredentialStorage: Sendable {
    /// Records `key` until `expiresAt` unless it is recorded and not expired at `now`; true when it recorded it.
    /// `atOnce`: stored before this returns (else it may be stored a moment later; see SQLite's).
    func spend(key: String, expiresAt: Date, now: Date, atOnce: Bool) async throws -> Bool
    /// Stores what is not stored yet, then deletes what expired by `before`; how many were deleted.
    func deleteExpired(before: Date) async throws -> Int
}

/// SQLite is one instance's store, so that instance's memory knows every proof it took: a proof is checked against
/// it and written with others in one transaction at most a second later (a write of its own per request halved a
/// bound session's throughput). The rows are what a restart reads back: proofs of the last minute stay refused,
/// except those of the last second before a crash. ID tokens and nonces are written at once.
final class SQLiteSpentCredentialStorage: SpentCredentialStorage {
    static let batchInterval: TimeInterval = 1
    static let batchSize = 1024

    private struct Memory {
        var live: [String: Date]
        var unwritten: [(key: String, expiresAt: Date)] = []
        var writtenAt = Date()

        mutating func takeUnwritten(at now: Date) -> [(key: String, expiresAt: Date)] {
            defer { (unwritten, writtenAt) = ([], now) }
            return unwritten
        }
    }

    private enum Outcome {
        case spentBefore
        case spent(write: [(key: String, expiresAt: Date)]?)
    }

    private let database: any DatabaseWriter
    private let memory: NIOLockedValueBox<Memory>

    init(database: any DatabaseWriter) {
        self.database = database
        let now = Date()
        let live = (try? database.read { db in
            try Row.fetchAll(db, sql: "SELECT key, expires_at FROM spent_credentials WHERE expires_at > ?", arguments: [now])
        })?.reduce(into: [String: Date]()) { live, row in live[row["key"]] = row["expires_at"] } ?? [:]
        memory = NIOLockedValueBox(Memory(live: live))
    }

    func spend(key: String, expiresAt: Date, now: Date, atOnce: Bool) async throws -> Bool {
        if atOnce {
            return try await database.write { db in
                try Self.insert(db, key: key, expiresAt: expiresAt, now: now)
                return db.changesCount > 0
            }
        }
        let outcome = memory.withLockedValue { memory -> Outcome in
            if let until = memory.live[key], until > now { return .spentBefore }
            memory.live[key] = expiresAt
            memory.unwritten.append((key, expiresAt))
            guard memory.unwritten.count >= Self.batchSize || now.timeIntervalSince(memory.writtenAt) >= Self.batchInterval else {
                return .spent(write: nil)
            }
            return .spent(write: memory.takeUnwritten(at: now))
        }
        switch outcome {
        case .spentBefore:
            return false
        case .spent(let batch):
            if let batch {
                try await database.write { db in
                    for (key, expiresAt) in batch { try Self.insert(db, key: key, expiresAt: expiresAt, now: now) }
                }
            }
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
        let batch = memory.withLockedValue { memory in
            memory.live = memory.live.filter { $0.value > date }
            return memory.takeUnwritten(at: Date())
        }
        return try await database.write { db in
            for (key, expiresAt) in batch { try Self.insert(db, key: key, expiresAt: expiresAt, now: date) }
            try db.execute(sql: "DELETE FROM spent_credentials WHERE expires_at <= ?", arguments: [date])
            return db.changesCount
        }
    }
}

struct PostgresSpentCredentialStorage: SpentCredentialStorage {
    let store: PostgresStore

    /// Always at once: another instance may be asked about the same key the next moment.
    func spend(key: String, expiresAt: Date, now: Date, atOnce: Bool) async throws -> Bool {
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
