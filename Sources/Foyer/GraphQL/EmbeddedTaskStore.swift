import GRDB

/// The embedded task service's data: the showcase's Task, in Foyer's SQLite.
struct TaskRecord: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "tasks"

    var id: Int64?
    var title: String
    var description: String
    var status: String
    var version: Int

    mutating func didInsert(_ inserted: InsertionSuccess) {
        id = inserted.rowID
    }
}

/// What a stale `updateTask` met: the task as stored now. The caller builds the OffixConflict error from it.
extension TaskRecord {
    /// The task as GraphQL clients and pages see it.
    var item: TaskItem {
        TaskItem(id: String(id ?? 0), version: version, title: title, description: description, status: status)
    }
}

struct TaskVersionConflict: Error {
    let serverState: TaskRecord
}

struct EmbeddedTaskStore: Sendable {
    let database: any DatabaseWriter

    /// `after` is a numeric offset, as in the showcase server.
    func all(first: Int?, after: Int) async throws -> [TaskRecord] {
        try await database.read { db in
            try TaskRecord.order(Column("id")).limit(first ?? -1, offset: after).fetchAll(db)
        }
    }

    func find(id: Int64) async throws -> TaskRecord? {
        try await database.read { db in try TaskRecord.fetchOne(db, key: id) }
    }

    func create(title: String, description: String, status: String) async throws -> TaskRecord {
        try await database.write { db in
            var task = TaskRecord(id: nil, title: title, description: description, status: status, version: 1)
            try task.insert(db)
            return task
        }
    }

    /// Applies the changes when `version` is the stored one, and bumps it; nil when there is no such task.
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

    /// The task as it was before it went, for the `taskDeleted` subscribers; nil when there was no such task.
    func delete(id: Int64) async throws -> TaskRecord? {
        try await database.write { db in try TaskRecord.fetchOne(db, key: id).map { task in try task.delete(db); return task } }
    }
}
