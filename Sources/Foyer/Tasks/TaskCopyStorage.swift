import Foundation
import GRDB
import PostgresNIO

/// The rows behind `TaskRepository`'s offline copies: the last good answer per user and read.
protocol TaskCopyStorage: Sendable {
    func keep(_ body: Data, userId: Int64, key: String, at date: Date) async throws
    func copy(userId: Int64, key: String) async throws -> (body: Data, cachedAt: Date)?
    func drop(userId: Int64, key: String) async throws
}

extension Store {
    var taskCopyStorage: any TaskCopyStorage { choose(sqlite: SQLiteTaskCopyStorage.init, postgres: PostgresTaskCopyStorage.init) }
}

struct SQLiteTaskCopyStorage: TaskCopyStorage {
    let database: any DatabaseWriter

    func keep(_ body: Data, userId: Int64, key: String, at date: Date) async throws {
        try await database.write { db in
            try db.execute(
                sql: "INSERT OR REPLACE INTO task_cache (user_id, key, body, cached_at) VALUES (?, ?, ?, ?)", arguments: [userId, key, body, date]
            )
        }
    }

    func copy(userId: Int64, key: String) async throws -> (body: Data, cachedAt: Date)? {
        try database.readNow { db in
            try Row.fetchOne(db, sql: "SELECT body, cached_at FROM task_cache WHERE user_id = ? AND key = ?", arguments: [userId, key])
                .map { ($0["body"], $0["cached_at"]) }
        }
    }

    func drop(userId: Int64, key: String) async throws {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM task_cache WHERE user_id = ? AND key = ?", arguments: [userId, key])
        }
    }
}

struct PostgresTaskCopyStorage: TaskCopyStorage {
    let store: PostgresStore

    func keep(_ body: Data, userId: Int64, key: String, at date: Date) async throws {
        try await store.query("""
            INSERT INTO task_cache (user_id, key, body, cached_at) VALUES (\(userId), \(key), \(body), \(date))
            ON CONFLICT (user_id, key) DO UPDATE SET body = excluded.body, cached_at = excluded.cached_at
            """)
    }

    func copy(userId: Int64, key: String) async throws -> (body: Data, cachedAt: Date)? {
        try await store.query("SELECT body, cached_at FROM task_cache WHERE user_id = \(userId) AND key = \(key)").first.map { row in
            let (body, cachedAt) = try row.decode((Data, Date).self)
            return (body, cachedAt)
        }
    }

    func drop(userId: Int64, key: String) async throws {
        try await store.query("DELETE FROM task_cache WHERE user_id = \(userId) AND key = \(key)")
    }
}
