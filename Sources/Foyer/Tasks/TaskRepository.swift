import Foundation

/// Tasks as the pages see them: live from the GraphQL server when it answers, and otherwise the last good
/// answer, kept per user in SQLite. Writes go to the server only: while it is unreachable they fail with a 503
/// and change nothing. Every read tries the server first, so pages are live again as soon as it is back.
struct TaskRepository: Sendable {
    let client: TaskClient
    let copies: any TaskCopyStorage
    let metrics: FoyerMetrics
    /// The clock, which tests set.
    var now: @Sendable () -> Date = { Date() }
    /// Shared by every copy of this repository: the routes hold copies of one value.
    private let recentlyKept = RecentlyKeptCopies()

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
        recentlyKept.forget(.init(userId: userId, key: "task:\(id)"))
        try await copies.drop(userId: userId, key: "task:\(id)")
        return deleted
    }

    private func read<Value: Codable & Sendable>(key: String, userId: Int64, live: () async throws -> Value) async throws -> Read<Value> {
        let copyKey = RecentlyKeptCopies.Key(userId: userId, key: key)
        do {
            let value = try await live()
            // Keys sorted: JSONEncoder orders an object's keys afresh on every call, so the same answer would not
            // give the same bytes.
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let body = try encoder.encode(value)
            let at = now()
            if recentlyKept.needsWriting(body, for: copyKey, at: at) {
                try await copies.keep(body, userId: userId, key: key, at: at)
                recentlyKept.wrote(body, for: copyKey, at: at)
            }
            return Read(value: value, offlineCopyFrom: nil)
        } catch let error as GraphQLUpstreamError where error.meansUnreachable {
            let copy = try await copies.copy(userId: userId, key: key)
            guard let copy, let value = try? JSONDecoder().decode(Value.self, from: copy.body) else { throw error }
            metrics.offlineAnswers.increment()
            let confirmed = recentlyKept.confirmed(copy.body, for: copyKey)
            return Read(value: value, offlineCopyFrom: max(copy.cachedAt, confirmed ?? copy.cachedAt))
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

/// The offline copies this process wrote lately. A page viewed again with the same answer wrote the same row again:
/// a write transaction per view, 30 % of `/tasks`' CPU. Now the same answer is written again only once its row
/// is a minute old; meanwhile the time it was last seen live is kept here, and an offline page says that time when
/// the row still holds that answer. A row another instance wrote since is read as it is, with its own time.
final class RecentlyKeptCopies: Sendable {
    struct Key: Hashable, Sendable {
        let userId: Int64
        let key: String
    }

    private struct Kept: Sendable {
        let body: Data
        let writtenAt: Date
        let seenAt: Date
    }

    static let rewriteAfter: TimeInterval = 60
    private let kept = StartOverCache<Key, Kept>(maximumCost: 8 << 20)

    /// False when this process wrote the same answer for the same read less than a minute ago; that answer is then
    /// noted as seen live at `now`.
    func needsWriting(_ body: Data, for key: Key, at now: Date) -> Bool {
        guard let last = kept.value(for: key), last.body == body, now.timeIntervalSince(last.writtenAt) < Self.rewriteAfter else {
            return true
        }
        kept.keep(Kept(body: body, writtenAt: last.writtenAt, seenAt: now), for: key, cost: body.count)
        return false
    }

    func wrote(_ body: Data, for key: Key, at date: Date) {
        kept.keep(Kept(body: body, writtenAt: date, seenAt: date), for: key, cost: body.count)
    }

    /// When `body` was last seen live for this read, if this process saw it since writing it.
    func confirmed(_ body: Data, for key: Key) -> Date? {
        kept.value(for: key).flatMap { $0.body == body ? $0.seenAt : nil }
    }

    func forget(_ key: Key) {
        kept.remove(key)
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
