import Foundation
import GraphQL
import NIOCore

/// The executor in front of every other: `/graphql` over HTTP and websocket, and the task pages' own reads, all go
/// through `QueryAnswers` for queries; mutations pass through and then drop what they may have changed.
struct SharedAnswers: GraphQLExecutor {
    let wrapped: any GraphQLExecutor
    let answers: QueryAnswers
    private let analyses = QueryAnalysisCache()

    init(wrapping wrapped: any GraphQLExecutor, answers: QueryAnswers) {
        self.wrapped = wrapped
        self.answers = answers
    }

    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        let kind = analyses.analysis(of: request.query).kind(named: request.operationName)
        guard case .query(let readsTasks) = kind else {
            return try await change(kind) { try await wrapped.execute(request, credentials: credentials) }
        }
        // Sorted keys: the same request is the same bytes, whatever order its variables were built in.
        let encoded = ByteBuffer(bytes: try Self.keyEncoder.encode(request))
        return try await answers.answer(encoded, readsTasks: readsTasks, credentials: credentials) {
            try await wrapped.execute(request, credentials: credentials)
        }
    }

    func execute(encoded request: ByteBuffer, kind: GraphQLOperationKind, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        guard case .query(let readsTasks) = kind else {
            return try await change(kind) { try await wrapped.execute(encoded: request, kind: kind, credentials: credentials) }
        }
        return try await answers.answer(request, readsTasks: readsTasks, credentials: credentials) {
            try await wrapped.execute(encoded: request, kind: kind, credentials: credentials)
        }
    }

    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        try await wrapped.subscribe(request, credentials: credentials)
    }

    func sharedSubscription(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> SharedSubscriptions.Start? {
        try await wrapped.sharedSubscription(request, credentials: credentials)
    }

    /// A mutation: whatever it did, or did half-way before failing, is dropped before anyone reads its answer.
    /// (Subscriptions, and texts that do not parse, change nothing here.)
    private func change(_ kind: GraphQLOperationKind, _ run: () async throws -> GraphQLReply) async throws -> GraphQLReply {
        guard kind == .mutation else { return try await run() }
        defer { answers.written() }
        return try await run()
    }

    private static let keyEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()
}
