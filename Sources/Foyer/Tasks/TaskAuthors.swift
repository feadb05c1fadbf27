import Foundation
import GraphQL
import NIOCore
import NIOConcurrencyHelpers

/// Who made the task changes Foyer itself made: the one observer of Foyer's own mutations (`TaskAuthorship`,
/// wrapping whichever executor runs them) records it here. The embedded service's changes happen inside the
/// mutation and read `current`; a remote task server's events come later over its feed, which does not say who,
/// and find the author by task id for `lifetime` seconds.
final class TaskAuthors: Sendable {
    /// The user a mutation runs for, while it runs.
    @TaskLocal static var current: Int64?

    static let lifetime: TimeInterval = 10
    private let authors = NIOLockedValueBox<[String: (userID: Int64, at: Date)]>([:])
    /// Told of every author learnt from this instance's own mutations (other instances may send the notification).
    private let learnt: @Sendable (Authored) -> Void

    /// Task ids one user's mutation answered with.
    struct Authored: Codable, Sendable, Equatable {
        let taskIDs: [String]
        let userID: Int64
    }

    init(learnt: @escaping @Sendable (Authored) -> Void = { _ in }) {
        self.learnt = learnt
    }

    /// Reads the ids in a mutation's answer: every top-level field is a task (`{id, …}`) or a task id (deleteTask).
    func record(answer: Data, userID: Int64, now: Date = Date()) {
        guard let root = try? JSONSerialization.jsonObject(with: answer) as? [String: Any],
            let data = root["data"] as? [String: Any]
        else { return }
        let ids = data.values.compactMap { value -> String? in
            switch value {
            case let task as [String: Any]: Self.id(task["id"])
            default: Self.id(value)
            }
        }
        guard !ids.isEmpty else { return }
        let authored = Authored(taskIDs: ids, userID: userID)
        remember(authored, now: now)
        learnt(authored)
    }

    /// Authors this instance learnt, or another instance did.
    func remember(_ authored: Authored, now: Date = Date()) {
        authors.withLockedValue { authors in
            if authors.count > 1024 { authors = authors.filter { now.timeIntervalSince($0.value.at) < Self.lifetime } }
            for id in authored.taskIDs { authors[id] = (authored.userID, now) }
        }
    }

    func author(of taskID: String, now: Date = Date()) -> Int64? {
        authors.withLockedValue { authors in
            guard let known = authors[taskID], now.timeIntervalSince(known.at) < Self.lifetime else { return nil }
            return known.userID
        }
    }

    private static func id(_ value: Any?) -> String? {
        switch value {
        case let string as String: string
        case let number as Int: String(number)
        default: nil
        }
    }
}

/// The observer of Foyer's own mutations: it runs each under its user's name (`TaskAuthors.current`, which the
/// embedded service's changes read) and records the tasks its answer names, whichever executor runs it.
/// Only in place when push notifications want authors: reading every answer is not free.
struct TaskAuthorship: GraphQLExecutor {
    let wrapped: any GraphQLExecutor
    let authors: TaskAuthors
    private let analyses = QueryAnalysisCache()

    init(wrapping wrapped: any GraphQLExecutor, authors: TaskAuthors) {
        self.wrapped = wrapped
        self.authors = authors
    }

    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        let isQuery = analyses.analysis(of: request.query).kind(named: request.operationName).isQuery
        return try await observe(isQuery: isQuery, credentials) { try await wrapped.execute(request, credentials: credentials) }
    }

    func execute(encoded request: ByteBuffer, kind: GraphQLOperationKind, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        try await observe(isQuery: kind.isQuery, credentials) { try await wrapped.execute(encoded: request, kind: kind, credentials: credentials) }
    }

    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        try await wrapped.subscribe(request, credentials: credentials)
    }

    func sharedSubscription(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> SharedSubscriptions.Start? {
        try await wrapped.sharedSubscription(request, credentials: credentials)
    }

    private func observe(
        isQuery: Bool, _ credentials: UpstreamCredentials, _ run: () async throws -> GraphQLReply
    ) async throws -> GraphQLReply {
        guard !isQuery, let userID = credentials.userID else { return try await run() }
        let reply = try await TaskAuthors.$current.withValue(userID) { try await run() }
        authors.record(answer: Data(reply.body.readableBytesView), userID: userID)
        return reply
    }
}
