import Foundation

/// Tasks as the pages see them: live from the GraphQL server when it answers, and otherwise the last good
/// answer, kept per user in SQLite. Writes go to the server only: while it is unreachable they fail with a 503
/// and change nothing. Every read tries the server first, so pages are live again as soon as it is back.
struct TaskRepository: Sendable {
    let client: TaskClient
    let copies: any TaskCopyStorage
    let metrics: FoyerMetrics

    /// A value and, when it came from the offline copy, when that copy was made.
    struct Read<Value: Sendable>: Sendable {
        let value: Value
        let offlineCopyFrom: Date?
    }

    func list(first: Int, after: Int, for identity: Identity, credentials: UpstreamCredentials) async throws -> Read<[TaskItem]> {
        try await read(key: "list:\(first):\(after)", userId: identity.userId) {
            try await client.list(first: first, after: after, credentials: credentials)
        }
    }

    func get(id: String, for identity: Identity, credentials: UpstreamCredentials) async throws -> Read<TaskItem?> {
        try await read(key: "task:\(id)", userId: identity.userId) {
            try await client.get(id: id, credentials: credentials)
        }
    }

    func create(title: String, description: String, status: String, credentials: UpstreamCredentials) async throws -> TaskItem {
        try await write { try await client.create(title: title, description: description, status: status, credentials: credentials) }
    }

    func update(
        _ id: String, version: Int, title: String?, description: String?, status: String?, credentials: UpstreamCredentials
    ) async throws -> TaskItem? {
        try await write {
            try await client.update(id, version: version, title: title, description: description, status: status, credentials: credentials)
        }
    }

    func delete(id: String, for identity: Identity, credentials: UpstreamCredentials) async throws -> Bool {
        let deleted = try await write { try await client.delete(id: id, credentials: credentials) }
        let userId = identity.userId
        // A deleted task must not come back from the offline copy.
        try await copies.drop(userId: userId, key: "task:\(id)")
        return deleted
    }

    private func read<Value: Codable & Sendable>(key: String, userId: Int64, live: () async throws -> Value) async throws -> Read<Value> {
        do {
            let value = try await live()
            let body = try JSONEncoder().encode(value)
            try await copies.keep(body, userId: userId, key: key, at: Date())
            return Read(value: value, offlineCopyFrom: nil)
        } catch let error as GraphQLUpstreamError where error.meansUnreachable {
            let copy = try await copies.copy(userId: userId, key: key)
            guard let copy, let value = try? JSONDecoder().decode(Value.self, from: copy.body) else { throw error }
            metrics.offlineAnswers.increment()
            return Read(value: value, offlineCopyFrom: copy.cachedAt)
        }
    }

    private func write<Value: Sendable>(_ operation: () async throws -> Value) async throws -> Value {
        do {
            return try await operation()
        } catch let error as GraphQLUpstreamError where error.meansUnreachable {
            throw AppError(
                .serviceUnavailable, title: "Tasks are offline",
                message: "The task server cannot be reached, so nothing was changed. Try again in a moment. (\(error.message))"
            )
        }
    }
}

extension GraphQLUpstreamError {
    /// Down, slow or garbled: worth serving the offline copy. An expired session is not: that needs a sign-in.
    var meansUnreachable: Bool {
        switch self {
        case .unreachable, .timedOut, .invalidReply: true
        case .sessionExpired: false
        }
    }

    var isSessionExpired: Bool {
        if case .sessionExpired = self { true } else { false }
    }
}
