import Foundation
import GraphQL
import NIOCore

/// Every GraphQL document the task pages send, in one place: the showcase's later "Graphback" schema renamed
/// these operations (findTasks, newTask, …), and a move to it should touch this file only.
enum TaskDocuments {
    static let fields = "id version title description status"
    static let list = "query Tasks($first: Int, $after: String) { allTasks(first: $first, after: $after) { \(fields) } }"
    static let get = "query Task($id: ID!) { getTask(id: $id) { \(fields) } }"
    static let create = "mutation CreateTask($title: String!, $description: String!, $status: TaskStatus) { createTask(title: $title, description: $description, status: $status) { \(fields) } }"
    static let update = "mutation UpdateTask($id: ID!, $version: Int!, $title: String, $description: String, $status: TaskStatus) { updateTask(id: $id, version: $version, title: $title, description: $description, status: $status) { \(fields) } }"
    static let delete = "mutation DeleteTask($id: ID!) { deleteTask(id: $id) }"
    /// The upstream's task events, one subscription per kind, by the field that carries the task.
    static func subscription(_ kind: TaskChange.Kind) -> String { "subscription { \(kind.rawValue) { \(fields) } }" }
}

struct TaskItem: Codable, Sendable, Equatable {
    static let statuses = ["OPEN", "ASSIGNED", "COMPLETE"]

    var id: String
    var version: Int?
    var title: String
    var description: String
    var status: String?
}

/// A stale `version`: the task as the server has it now, to show beside what the user sent.
struct TaskConflict: Error {
    let server: TaskItem
}

/// The upstream answered with GraphQL errors where data was expected.
struct TaskOperationFailed: Error, CustomStringConvertible {
    let messages: [String]
    var description: String { messages.joined(separator: "; ") }
}

/// Typed task operations over whichever GraphQL executor is configured.
struct TaskClient: Sendable {
    let executor: any GraphQLExecutor

    func list(first: Int, after: Int, credentials: UpstreamCredentials) async throws -> [TaskItem] {
        let data: [String: [TaskItem?]?] = try await run(TaskDocuments.list, ["first": .number(Number(first)), "after": .string(String(after))], credentials)
        return (data["allTasks"] ?? nil)?.compactMap { $0 } ?? []
    }

    func get(id: String, credentials: UpstreamCredentials) async throws -> TaskItem? {
        let data: [String: TaskItem?] = try await run(TaskDocuments.get, ["id": .string(id)], credentials)
        return data["getTask"] ?? nil
    }

    func create(title: String, description: String, status: String, credentials: UpstreamCredentials) async throws -> TaskItem {
        let data: [String: TaskItem?] = try await run(
            TaskDocuments.create, ["title": .string(title), "description": .string(description), "status": .string(status)], credentials
        )
        guard let task = data["createTask"] ?? nil else { throw TaskOperationFailed(messages: ["createTask returned nothing"]) }
        return task
    }

    /// nil when the task is gone; throws TaskConflict when `version` is stale.
    func update(_ id: String, version: Int, title: String?, description: String?, status: String?, credentials: UpstreamCredentials) async throws -> TaskItem? {
        var variables: [String: Map] = ["id": .string(id), "version": .number(Number(version))]
        if let title { variables["title"] = .string(title) }
        if let description { variables["description"] = .string(description) }
        if let status { variables["status"] = .string(status) }
        let data: [String: TaskItem?] = try await run(TaskDocuments.update, variables, credentials)
        return data["updateTask"] ?? nil
    }

    func delete(id: String, credentials: UpstreamCredentials) async throws -> Bool {
        let data: [String: String?] = try await run(TaskDocuments.delete, ["id": .string(id)], credentials)
        return (data["deleteTask"] ?? nil) != nil
    }

    private struct Reply<Data: Decodable>: Decodable {
        struct Error: Decodable {
            let message: String
            let extensions: Extensions?
        }
        struct Extensions: Decodable {
            let exception: Exception?
        }
        struct Exception: Decodable {
            let conflictInfo: ConflictInfo?
        }
        struct ConflictInfo: Decodable {
            let serverState: TaskItem
        }
        let data: Data?
        let errors: [Error]?
    }

    private func run<Data: Decodable>(_ document: String, _ variables: [String: Map], _ credentials: UpstreamCredentials) async throws -> Data {
        let reply = try await executor.execute(GraphQLRequest(query: document, variables: variables), credentials: credentials)
        let decoded: Reply<Data>
        do {
            decoded = try JSONDecoder().decode(Reply<Data>.self, from: Foundation.Data(buffer: reply.body))
        } catch {
            throw GraphQLUpstreamError.invalidReply("the task reply did not have the showcase schema's shape (\(error))")
        }
        if let errors = decoded.errors, !errors.isEmpty {
            if let server = errors.lazy.compactMap({ $0.extensions?.exception?.conflictInfo?.serverState }).first {
                throw TaskConflict(server: server)
            }
            throw TaskOperationFailed(messages: errors.map(\.message))
        }
        guard let data = decoded.data else { throw TaskOperationFailed(messages: ["the reply had neither data nor errors"]) }
        return data
    }
}
