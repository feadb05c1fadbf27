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

    /// An embedded task as pages saw it change (its id is this service's own, so a number).
    init(_ item: TaskItem) {
        self.init(id: Int64(item.id), title: item.title, description: item.description, status: item.status ?? "OPEN", version: item.version ?? 1)
    }
}

struct TaskVersionConflict: Error {
    let serverState: TaskRecord
}

struct EmbeddedTaskRepository: Sendable {
    let storage: any EmbeddedTaskStorage

    init(store: Store) {
        storage = store.embeddedTaskStorage
    }

    func all(first: Int?, after: Int) async throws -> [TaskRecord] {
        try await storage.all(first: first, after: after)
    }

    func find(id: Int64) async throws -> TaskRecord? {
        try await storage.find(id: id)
    }

    func create(title: String, description: String, status: String) async throws -> TaskRecord {
        try await storage.insert(title: title, description: description, status: status)
    }

    func update(id: Int64, version: Int, title: String?, description: String?, status: String?) async throws -> TaskRecord? {
        try await storage.update(id: id, version: version, title: title, description: description, status: status)
    }

    func delete(id: Int64) async throws -> TaskRecord? {
        try await storage.delete(id: id)
    }
}
