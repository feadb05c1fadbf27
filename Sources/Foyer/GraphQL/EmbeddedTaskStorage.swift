import Foundation
import GRDB
import PostgresNIO

/// The rows behind the embedded task service.
protocol EmbeddedTaskStorage: Sendable {
    /// By id; `after` is a numeric offset, as in the showcase server.
    func all(first: Int?, after: Int) async throws -> [TaskRecord]
    func find(id: Int64) async throws -> TaskRecord?
    func insert(title: String, description: String, status: String) async throws -> TaskRecord
    /// Applies the changes when `version` is the stored one, and bumps it; nil when there is no such task.
    /// Throws `TaskVersionConflict` with the stored task when `version` is stale.
    func update(id: Int64, version: Int, title: String?, description: String?, status: String?) async throws -> TaskRecord?
    /// The task as it was before it went; nil when there was no such task.
    func delete(id: Int64) async throws -> TaskRecord?
}

extension Store {
    var embeddedTaskStorage: any EmbeddedTaskStorage { choose(sqlite: SQLiteEmbeddedTaskStorage.init, postgres: PostgresEmbeddedTaskStorage.init) }
}

struct SQLiteEmbeddedTaskStorage: EmbeddedTaskStorage {
    let database: any DatabaseWriter

    func all(first: Int?, after: Int) async throws -> [TaskRecord] {
        try database.readNow { db in
            try TaskRecord.order(Column("id")).limit(first ?? -1, offset: after).fetchAll(db)
        }
    }

    func find(id: Int64) async throws -> TaskRecord? {
        try database.readStatementNow { db in try TaskRecord.fetchOne(db, key: id) }
    }

    func insert(title: String, description: String, status: String) async throws -> TaskRecord {
        try await database.write { db in
            var task = TaskRecord(id: nil, title: title, description: description, status: status, version: 1)
            try task.insert(db)
            return task
        }
    }

    func update(id: Int64, version: Int, title: String?, description: String?, status: String?) async throws -> TaskRecord? {
        try await database.write { db in
            guard var task = try TaskRecord.fetchOne(db, key: id) else { return nil }
            guard task.version == version else { throw TaskVersionConflict(serverState: task) }
            if let title { task.title = title }
            if let description { task.description = description }
            if let status { task.status = status }
            task.version += 1
            try task.update(db)
            return task
        }
    }

    func delete(id: Int64) async throws -> TaskRecord? {
        try await database.write { db in try TaskRecord.fetchOne(db, key: id).map { task in try task.delete(db); return task } }
    }
}

struct PostgresEmbeddedTaskStorage: EmbeddedTaskStorage {
    let store: PostgresStore

    func all(first: Int?, after: Int) async throws -> [TaskRecord] {
        try await store.query("SELECT * FROM tasks ORDER BY id LIMIT \(first.map { Int64($0) }) OFFSET \(after)").map(Self.task)
    }

    func find(id: Int64) async throws -> TaskRecord? {
        try await store.query("SELECT * FROM tasks WHERE id = \(id)").first.map(Self.task)
    }

    func insert(title: String, description: String, status: String) async throws -> TaskRecord {
        try await store.query("""
            INSERT INTO tasks (title, description, status, version) VALUES (\(title), \(description), \(status), 1) RETURNING *
            """).first.map(Self.task)!
    }

    func update(id: Int64, version: Int, title: String?, description: String?, status: String?) async throws -> TaskRecord? {
        let logger = store.logger
        return try await store.transaction { connection in
            guard let row = try await connection.run("SELECT * FROM tasks WHERE id = \(id) FOR UPDATE", logger: logger).first else { return nil }
            let stored = try Self.task(row)
            guard stored.version == version else { throw TaskVersionConflict(serverState: stored) }
            return try await connection.run("""
                UPDATE tasks SET title = coalesce(\(title), title), description = coalesce(\(description), description),
                status = coalesce(\(status), status), version = version + 1 WHERE id = \(id) RETURNING *
                """, logger: logger).first.map(Self.task)
        }
    }

    func delete(id: Int64) async throws -> TaskRecord? {
        try await store.query("DELETE FROM tasks WHERE id = \(id) RETURNING *").first.map(Self.task)
    }

    private static func task(_ row: PostgresRow) throws -> TaskRecord {
        try row.makeRandomAccess().decode(TaskRecord.self)
    }
}
