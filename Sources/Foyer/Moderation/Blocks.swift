import Foundation
import GRDB
import NIOConcurrencyHelpers
import PostgresNIO

/// Who keeps whom away. A block works both ways on every read path: the blocker sees nothing of the blocked person,
/// and the blocked person, signed in, sees nothing of the blocker. Each person's set of such people is kept in
/// memory after its first read, until a block of theirs changes (on any instance: `ModerationFeature.blocksChanged`).
/// Their open live streams are told too: from then on they are not sent the other's changes, and what they show
/// loads again.
final class Blocks: Sendable {
    let storage: any BlockStorage
    /// Told of each change, so the other instances read both people's sets again.
    private let cluster: ClusterBus?
    private let streams: LiveStreams?
    private let apart = NIOLockedValueBox([Int64: Set<Int64>]())
    static let capacity = 10_000

    init(store: Store, cluster: ClusterBus? = nil, streams: LiveStreams? = nil) {
        storage = store.blockStorage
        self.cluster = cluster
        self.streams = streams
    }

    /// True when the block is new. Holds from the next request of either person on, on every instance, and on
    /// their open live streams at once.
    func block(_ blocked: Int64, by blocker: Int64) async throws -> Bool {
        let new = try await storage.block(blocked, by: blocker, at: Date())
        try await changed([blocker, blocked])
        return new
    }

    func unblock(_ blocked: Int64, by blocker: Int64) async throws {
        if try await storage.unblock(blocked, by: blocker) { try await changed([blocker, blocked]) }
    }

    private func changed(_ users: [Int64]) async throws {
        cluster?.send(users, on: ModerationFeature.blocksChanged)
        try await heard(users)
    }

    /// A block between `users` changed, here or on another instance: their sets are read again, and their open
    /// streams here follow the new ones.
    func heard(_ users: [Int64]) async throws {
        forget(users)
        guard let streams else { return }
        for user in users { streams.keepApart(viewer: user, from: try await keptApart(from: user)) }
    }

    /// The people `userId` must not see, nor be seen by: those they blocked and those who blocked them.
    func keptApart(from userId: Int64) async throws -> Set<Int64> {
        if let known = apart.withLockedValue({ $0[userId] }) { return known }
        let people = try await storage.keptApart(from: userId)
        apart.withLockedValue { apart in
            if apart.count >= Self.capacity { apart.removeAll(keepingCapacity: true) }
            apart[userId] = people
        }
        return people
    }

    /// For a request: nobody when signed out.
    func keptApart(from caller: Identity?) async throws -> Set<Int64> {
        guard let caller else { return [] }
        return try await keptApart(from: caller.userId)
    }

    /// Both people's sets are read again (here; other instances hear it through the cluster).
    func forget(_ users: [Int64]) {
        apart.withLockedValue { apart in for user in users { apart.removeValue(forKey: user) } }
    }

    func forgetAll() {
        apart.withLockedValue { $0.removeAll() }
    }
}

/// A block as its blocker lists it.
struct Block: Sendable {
    let blocked: User.Public
    let createdAt: Date
}

protocol BlockStorage: Sendable {
    /// True when the block is new.
    func block(_ blocked: Int64, by blocker: Int64, at date: Date) async throws -> Bool
    /// True when there was one.
    func unblock(_ blocked: Int64, by blocker: Int64) async throws -> Bool
    func blocks(by blocker: Int64) async throws -> [Block]
    func keptApart(from userId: Int64) async throws -> Set<Int64>
}

extension Store {
    var blockStorage: any BlockStorage { choose(sqlite: SQLiteBlockStorage.init, postgres: PostgresBlockStorage.init) }
}

struct SQLiteBlockStorage: BlockStorage {
    let database: any DatabaseWriter

    func block(_ blocked: Int64, by blocker: Int64, at date: Date) async throws -> Bool {
        try await database.write { db in
            try db.execute(
                sql: "INSERT INTO blocks (blocker_id, blocked_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING", arguments: [blocker, blocked, date]
            )
            return db.changesCount > 0
        }
    }

    func unblock(_ blocked: Int64, by blocker: Int64) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM blocks WHERE blocker_id = ? AND blocked_id = ?", arguments: [blocker, blocked])
            return db.changesCount > 0
        }
    }

    func blocks(by blocker: Int64) async throws -> [Block] {
        try database.readNow { db in
            try Row.fetchAll(db, sql: """
                SELECT users.id, users.name, blocks.created_at FROM blocks JOIN users ON users.id = blocks.blocked_id
                WHERE blocks.blocker_id = ? ORDER BY blocks.created_at DESC
                """, arguments: [blocker]).map { Block(blocked: User.Public(id: $0["id"], name: $0["name"]), createdAt: $0["created_at"]) }
        }
    }

    func keptApart(from userId: Int64) async throws -> Set<Int64> {
        try database.readNow { db in
            Set(try Int64.fetchAll(db, sql: """
                SELECT blocked_id FROM blocks WHERE blocker_id = ? UNION SELECT blocker_id FROM blocks WHERE blocked_id = ?
                """, arguments: [userId, userId]))
        }
    }
}

struct PostgresBlockStorage: BlockStorage {
    let store: PostgresStore

    func block(_ blocked: Int64, by blocker: Int64, at date: Date) async throws -> Bool {
        try await !store.query("""
            INSERT INTO blocks (blocker_id, blocked_id, created_at) VALUES (\(blocker), \(blocked), \(date)) ON CONFLICT DO NOTHING RETURNING blocker_id
            """).isEmpty
    }

    func unblock(_ blocked: Int64, by blocker: Int64) async throws -> Bool {
        try await !store.query("DELETE FROM blocks WHERE blocker_id = \(blocker) AND blocked_id = \(blocked) RETURNING blocker_id").isEmpty
    }

    func blocks(by blocker: Int64) async throws -> [Block] {
        try await store.query("""
            SELECT users.id, users.name, blocks.created_at FROM blocks JOIN users ON users.id = blocks.blocked_id
            WHERE blocks.blocker_id = \(blocker) ORDER BY blocks.created_at DESC
            """).map {
            let (id, name, createdAt) = try $0.decode((Int64, String, Date).self)
            return Block(blocked: User.Public(id: id, name: name), createdAt: createdAt)
        }
    }

    func keptApart(from userId: Int64) async throws -> Set<Int64> {
        Set(try await store.query("""
            SELECT blocked_id FROM blocks WHERE blocker_id = \(userId) UNION SELECT blocker_id FROM blocks WHERE blocked_id = \(userId)
            """).map { try $0.decode(Int64.self) })
    }
}
