import Foundation
import GraphQL
import HTTPTypes
import NIOCore

/// One way to run GraphQL for a caller, two implementations: the embedded task service, or the configured
/// upstream server. Replies are JSON bytes exactly as produced, so the proxy can pass errors through untouched.
protocol GraphQLExecutor: Sendable {
    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply
    /// The same for a request as a client encoded it (a GraphQL-over-HTTP POST body, already checked to be one),
    /// so the proxy can pass it on as it is. `kind`: what admission found it to be.
    func execute(encoded request: ByteBuffer, kind: GraphQLOperationKind, credentials: UpstreamCredentials) async throws -> GraphQLReply
    /// Starts a subscription. The stream ends when the server completes it; ending the iteration stops it.
    /// It fails with GraphQLUpstreamError when the server cannot be reached or no longer accepts the credentials.
    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error>
    /// The same subscription as one that every subscriber of the same request shares, when this executor shares
    /// them (the embedded service does): a socket then follows the shared results from its own event loop instead
    /// of reading them on a task of its own. nil: this executor does not share, use `subscribe`.
    func sharedSubscription(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> SharedSubscriptions.Start?
}

extension GraphQLExecutor {
    func sharedSubscription(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> SharedSubscriptions.Start? { nil }

    /// Executors that run the request themselves read it first.
    func execute(encoded request: ByteBuffer, kind: GraphQLOperationKind, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        try await execute(JSONDecoder().decode(GraphQLRequest.self, from: request), credentials: credentials)
    }
}

/// What a subscription delivers, as JSON bytes exactly as produced.
enum SubscriptionEvent: Sendable {
    /// One execution result, `{"data": …, "errors": […]}`.
    case next(ByteBuffer)
    /// The subscription could not start (a validation error, say): a JSON array of GraphQL errors. Nothing follows.
    case refused(ByteBuffer)
}

/// What the upstream should see of the caller: the bearer token to attach, if any. `userID` is whom Foyer runs the
/// request for, so the changes it makes can be told apart from other users' (push notifications skip the author).
struct UpstreamCredentials: Sendable {
    var bearerToken: String?
    var userID: Int64? = nil
}

/// The upstream credentials of a signed-in caller: a configured static token, or their session's Keycloak access
/// token (refreshed when about to expire; AuthenticationRequired when Keycloak ended the session).
typealias UpstreamCredentialSource = @Sendable (Identity) async throws -> UpstreamCredentials

struct GraphQLReply: Sendable {
    var status: HTTPResponse.Status
    var body: ByteBuffer
}

/// The upstream could not give an answer; each case has the status and words the client gets.
enum GraphQLUpstreamError: Error {
    case unreachable(String)
    case timedOut
    /// `403 Access denied`, or a redirect to a login page: the upstream no longer accepts our credentials.
    case sessionExpired
    case invalidReply(String)

    var status: HTTPResponse.Status {
        switch self {
        case .unreachable, .invalidReply: .badGateway
        case .timedOut: .gatewayTimeout
        case .sessionExpired: .unauthorized
        }
    }

    var metricsKind: FoyerMetrics.UpstreamFailure {
        switch self {
        case .unreachable: .unreachable
        case .timedOut: .timeout
        case .sessionExpired: .sessionExpired
        case .invalidReply: .invalidReply
        }
    }

    var message: String {
        switch self {
        case .unreachable(let reason): "The GraphQL server cannot be reached: \(reason)"
        case .timedOut: "The GraphQL server did not answer in time"
        case .sessionExpired: "The upstream session expired: sign in again"
        case .invalidReply(let reason): "The GraphQL server gave an answer that is not GraphQL: \(reason)"
        }
    }
}

/// Runs the showcase task schema in-process: the default when no upstream is configured.
struct EmbeddedGraphQLExecutor: GraphQLExecutor {
    let schema: GraphQLSchema
    let store: EmbeddedTaskRepository
    let events: TaskEvents
    let shared = SharedSubscriptions()

    /// Its changes go out through `changes`, and its subscriptions follow what comes in there.
    init(store: EmbeddedTaskRepository, changes: TaskChanges) throws {
        self.store = store
        events = TaskEvents(following: changes)
        schema = try EmbeddedTaskSchema.make(store: store, events: events, changes: changes)
    }

    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        let result: GraphQLResult
        do {
            result = try await graphql(
                schema: schema, request: request.query, variableValues: request.variables, operationName: request.operationName
            )
        } catch let error as GraphQLError {
            // Syntax errors are thrown rather than returned; clients expect them in `errors` all the same.
            result = GraphQLResult(errors: [error])
        }
        // GraphQL over HTTP: a request that could not run at all (no data) is a 400.
        let status: HTTPResponse.Status = result.data == nil && !result.errors.isEmpty ? .badRequest : .ok
        return GraphQLReply(status: status, body: ByteBuffer(bytes: try JSONEncoder().encode(result)))
    }
}

extension EmbeddedGraphQLExecutor {
    /// Subscribers with the same request share one execution (SharedSubscriptions): the schema has nothing that
    /// differs by user, so the results are the same for all.
    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        switch try await share(request) {
        case .refused(let errors):
            return AsyncThrowingStream { continuation in
                continuation.yield(.refused(errors))
                continuation.finish()
            }
        case .joined(let membership):
            return shared.events(of: membership)
        }
    }

    func sharedSubscription(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> SharedSubscriptions.Start? {
        try await share(request)
    }

    private func share(_ request: GraphQLRequest) async throws -> SharedSubscriptions.Start {
        let key = try SharedSubscriptions.Key(request)
        if let membership = shared.attach(key) { return .joined(membership) }
        let started: Result<AsyncThrowingStream<GraphQLResult, any Error>, GraphQLErrors>
        do {
            started = try await graphqlSubscribe(
                schema: schema, request: request.query, variableValues: request.variables, operationName: request.operationName
            )
        } catch let error as GraphQLError {
            started = .failure(GraphQLErrors([error]))
        }
        switch started {
        case .failure(let errors):
            return .refused(ByteBuffer(bytes: try JSONEncoder().encode(errors.errors)))
        case .success(let results):
            return .joined(shared.install(key, results: results))
        }
    }
}

extension UpstreamCredentials {
    /// A provider's session relays its own access token; other sessions the configured one, if any.
    static func source(providers: IdentityProviders, configuredToken: String?) -> UpstreamCredentialSource {
        { identity in
            UpstreamCredentials(bearerToken: try await providers.accessToken(for: identity) ?? configuredToken, userID: identity.userId)
        }
    }
}
