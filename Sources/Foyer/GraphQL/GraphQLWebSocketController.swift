import Foundation
import GraphQL
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// The two GraphQL-over-WebSocket dialects, chosen by the subprotocol the client offers. They carry the same
/// operations; they differ in words and in how they refuse.
enum GraphQLWebSocketDialect: String, Sendable {
    /// The `graphql-ws` library's protocol: today's clients.
    case transportWS = "graphql-transport-ws"
    /// subscriptions-transport-ws, Apollo's legacy one: what the showcase apps speak.
    case legacy = "graphql-ws"

    /// The newer one when a client offers both.
    static func chosen(from offered: [String]) -> Self? {
        let names = offered.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        if names.contains(Self.transportWS.rawValue) { return .transportWS }
        if names.contains(Self.legacy.rawValue) { return .legacy }
        return nil
    }

    var startType: String { self == .legacy ? "start" : "subscribe" }
    var stopType: String { self == .legacy ? "stop" : "complete" }
    var resultType: String { self == .legacy ? "data" : "next" }
}

/// The websocket routes' request context: Hummingbird's, and the connection, which shared subscriptions write to.
struct FoyerWebSocketRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<Self>
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        webSocket = .init()
        channel = source.channel
    }
}

/// WebSocket `/graphql`: subscriptions, and queries and mutations too, for a signed-in user. The user is known
/// from the `connection_init` payload (`Authorization: Bearer …`, as the showcase apps send it) or from the
/// upgrade request itself (a Bearer header, or the session cookie when the page is one of ours).
struct GraphQLWebSocketController {
    let executor: any GraphQLExecutor
    let authenticator: Authenticator
    let credentials: UpstreamCredentialSource
    let metrics: FoyerMetrics
    /// A socket signed in with a session closes when the session ends (4401).
    let holds: SessionHolds
    /// The same rules as over HTTP: persisted queries, trusted documents, introspection, limits.
    let admission: GraphQLAdmission
    /// The same quota as over HTTP: each operation started counts.
    let rateLimit: CallerRateLimit?

    /// Where websockets are served: the only path whose `Upgrade` the edge lets through.
    static let path = "/graphql"

    func addRoutes(to router: Router<FoyerWebSocketRequestContext>) {
        router.ws(RouterPath(Self.path)) { request, _ in
            // Without a dialect we could not be understood: the request goes on to HTTP GET /graphql, which says so.
            guard let dialect = GraphQLWebSocketDialect.chosen(from: request.headers[values: .secWebSocketProtocol]) else {
                return .dontUpgrade
            }
            return .upgrade([.secWebSocketProtocol: dialect.rawValue])
        } onUpgrade: { inbound, outbound, context in
            guard let dialect = GraphQLWebSocketDialect.chosen(from: context.request.headers[values: .secWebSocketProtocol]) else { return }
            let connection = GraphQLSocketConnection(
                dialect: dialect, upgradeRequest: context.request, channel: context.requestContext.channel, controller: self
            )
            // Upstream subscriptions started on this socket carry its trace.
            let trace = RequestTrace(continuing: context.request.headers, fallbackID: RequestTrace.newRequestID())
            metrics.openWebSockets.increment()
            defer { metrics.openWebSockets.decrement() }
            await RequestTrace.$current.withValue(trace) {
                await connection.run(inbound: inbound, outbound: outbound)
            }
        }
    }

    /// The identity a `connection_init` payload names, else the one the upgrade request carried.
    /// A Keycloak token that does not verify counts as no identity: the socket is refused like any other.
    func authenticate(initPayload: Map?, upgradeRequest: Request) async throws -> Identity? {
        do {
            // A token bound to the app's key (`DPoP T`) is proved by the upgrade request's DPoP header.
            if let (token, credential) = Self.token(in: initPayload) {
                return try await authenticator.identity(token: token, credential: credential, request: upgradeRequest)
            }
            return try await authenticatedUpgrade(upgradeRequest)
        } catch is AuthenticationRequired {
            return nil
        } catch is DPoPRefusal {
            return nil
        }
    }

    private func authenticatedUpgrade(_ upgradeRequest: Request) async throws -> Identity? {
        guard let (token, credential) = AuthenticationMiddleware.presentedToken(upgradeRequest) else { return nil }
        // Browsers send cookies with cross-site websocket upgrades and no CORS guards them: only our own pages'.
        if credential == .cookie, !upgradeRequest.headers[values: .origin].allSatisfy({ Self.isSameOrigin($0, as: upgradeRequest) }) {
            return nil
        }
        return try await authenticator.identity(token: token, credential: credential, request: upgradeRequest)
    }

    /// `{"Authorization": "Bearer T"}` (or `DPoP T`) in any letter case, or `{"X-Session-Token": "T"}` as our sign-in
    /// hands it out.
    private static func token(in payload: Map?) -> (String, Identity.Credential)? {
        guard case .dictionary(let fields) = payload else { return nil }
        for (key, value) in fields {
            guard case .string(let text) = value else { continue }
            switch key.lowercased() {
            case "authorization": return AuthenticationMiddleware.credential(fromAuthorization: text)
            case "x-session-token": return text.isEmpty ? nil : (text, .bearer)
            default: continue
            }
        }
        return nil
    }

    private static func isSameOrigin(_ origin: String, as request: Request) -> Bool {
        guard let host = request.head.authority, let schemeEnd = origin.range(of: "://") else { return false }
        return origin[schemeEnd.upperBound...].lowercased() == host.lowercased()
    }
}

/// One client's socket: a reader that follows the protocol, a writer that owns the socket's output, and a task per
/// running operation, all ended together when the socket closes.
private struct GraphQLSocketConnection: Sendable {
    /// graphql-transport-ws asks the server to close a socket that does not `connection_init` in time.
    static let initialisationTimeout: Duration = .seconds(10)
    /// Legacy clients count a connection dead without `ka` messages now and then.
    static let keepAliveInterval: Duration = .seconds(15)

    typealias Outgoing = GraphQLSocketOutbox.Outgoing

    struct ClientMessage: Decodable {
        let type: String
        let id: String?
        let payload: Map?
    }

    struct StartMessage: Decodable {
        let payload: GraphQLController.Operation
    }

    /// State the reader shares with the timers and the operations.
    final class Shared: Sendable {
        let identity = NIOLockedValueBox<Identity?>(nil)
        let initialised = NIOLockedValueBox(false)
        /// Running operations by client id; the UUID tells an operation apart from a later one reusing its id.
        let operations = NIOLockedValueBox<[String: (run: UUID, task: Task<Void, Never>)]>([:])
        /// Releases the session's hold on this socket.
        let release = NIOLockedValueBox<SessionHolds.Release?>(nil)
    }

    let dialect: GraphQLWebSocketDialect
    let upgradeRequest: Request
    /// The socket's connection: shared subscriptions write their results to it from its event loop.
    let channel: any Channel
    let controller: GraphQLWebSocketController
    let shared = Shared()

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async {
        let (outgoing, send) = GraphQLSocketOutbox.make(metrics: controller.metrics)
        await withDiscardingTaskGroup { group in
            // The writer outlives the reader so that a last word (an error, a close code) still goes out.
            group.addTask {
                for await item in outgoing {
                    if send.isOverflowed {
                        try? await outbound.close(.unknown(1013), reason: GraphQLSocketOutbox.fellBehindReason)
                        return
                    }
                    switch item {
                    case .text(let text):
                        try? await outbound.writeTextMessage(text)
                    case .close(let code, let reason):
                        try? await outbound.close(code, reason: reason)
                        return
                    }
                }
            }
            await withDiscardingTaskGroup { timers in
                timers.addTask {
                    try? await Task.sleep(for: Self.initialisationTimeout)
                    if !Task.isCancelled, !shared.initialised.withLockedValue({ $0 }) {
                        send.yield(.close(.unknown(4408), "Connection initialisation timeout"))
                    }
                }
                if dialect == .legacy {
                    timers.addTask {
                        while (try? await Task.sleep(for: Self.keepAliveInterval)) != nil {
                            if shared.initialised.withLockedValue({ $0 }) { send.yield(.text(#"{"type":"ka"}"#)) }
                        }
                    }
                }
                await read(inbound, send: send)
                timers.cancelAll()
            }
            shared.release.withLockedValue { $0 }?()
            for (_, operation) in shared.operations.withLockedValue({ $0 }) { operation.task.cancel() }
            send.finish()
        }
    }

    private func read(_ inbound: WebSocketInboundStream, send: GraphQLSocketOutbox) async {
        do {
            for try await message in inbound.messages(maxSize: GraphQLController.maximumBodySize) {
                guard case .text(let text) = message,
                    let envelope = try? JSONDecoder().decode(ClientMessage.self, from: Data(text.utf8))
                else {
                    if reject(.unknown(4400), "Messages must be JSON objects with a type", id: nil, send: send) { return }
                    continue
                }
                if try await handle(envelope, text: text, send: send) { return }
            }
        } catch {
            // The socket broke or a message was too large: the websocket layer closes it; operations end with it.
        }
    }

    /// Acts on one client message; true when the connection is over.
    private func handle(_ message: ClientMessage, text: String, send: GraphQLSocketOutbox) async throws -> Bool {
        switch message.type {
        case "connection_init":
            if shared.initialised.withLockedValue({ $0 }) {
                return reject(.unknown(4429), "Too many initialisation requests", id: nil, send: send)
            }
            // In a child task: this task lives as long as the socket, and keeps the stack its deepest call needed.
            let (controller, upgradeRequest, payload) = (controller, upgradeRequest, message.payload)
            let authenticated = try await withThrowingTaskGroup(of: Identity?.self) { group in
                group.addTask { try await controller.authenticate(initPayload: payload, upgradeRequest: upgradeRequest) }
                return try await group.next() ?? nil
            }
            guard let identity = authenticated else {
                let reason = "Sign in first: give Authorization: Bearer <X-Session-Token> in the connection_init payload"
                if dialect == .legacy {
                    send.yield(.text(Self.envelope("connection_error", id: nil, payload: Self.errorObject(reason, code: "UNAUTHENTICATED"))))
                    send.yield(.close(.normalClosure, "Unauthenticated"))
                } else {
                    send.yield(.close(.unknown(4403), "Forbidden"))
                }
                return true
            }
            shared.identity.withLockedValue { $0 = identity }
            shared.initialised.withLockedValue { $0 = true }
            if let session = identity.session {
                let release = controller.holds.hold(session) { [shared, dialect] in Self.sessionEnded(shared, dialect: dialect, send: send) }
                shared.release.withLockedValue { $0 = release }
            }
            send.yield(.text(#"{"type":"connection_ack"}"#))
            if dialect == .legacy { send.yield(.text(#"{"type":"ka"}"#)) }
        case "ping" where dialect == .transportWS:
            send.yield(.text(#"{"type":"pong"}"#))
        case "pong" where dialect == .transportWS:
            break
        case "connection_terminate" where dialect == .legacy:
            send.yield(.close(.normalClosure, "Terminated"))
            return true
        case dialect.startType:
            guard let identity = shared.identity.withLockedValue({ $0 }) else {
                return reject(.unknown(4401), "Unauthorized", id: message.id, send: send)
            }
            guard let id = message.id, !id.isEmpty,
                let operation = try? JSONDecoder().decode(StartMessage.self, from: Data(text.utf8)).payload
            else {
                return reject(.unknown(4400), "\(dialect.startType) needs an id and a payload {\"query\": …}", id: message.id, send: send)
            }
            if shared.operations.withLockedValue({ $0[id] != nil }) {
                return reject(.unknown(4409), "Subscriber for \(id) already exists", id: id, send: send)
            }
            start(operation, id: id, identity: identity, send: send)
        case dialect.stopType:
            guard let id = message.id, let operation = shared.operations.withLockedValue({ $0.removeValue(forKey: id) }) else { break }
            operation.task.cancel()
            // subscriptions-transport-ws confirms a stop with `complete`; graphql-transport-ws must say nothing more.
            if dialect == .legacy { send.yield(.text(Self.envelope("complete", id: id, payload: nil))) }
        default:
            return reject(.unknown(4400), "Unknown message type \(message.type)", id: message.id, send: send)
        }
        return false
    }

    /// The socket's session ended (signed out, revoked, expired): its operations stop, nothing new may start, and
    /// the socket closes with 4401 (the legacy protocol hears `connection_error` first, having no close codes).
    private static func sessionEnded(_ shared: Shared, dialect: GraphQLWebSocketDialect, send: GraphQLSocketOutbox) {
        shared.identity.withLockedValue { $0 = nil }
        let operations = shared.operations.withLockedValue { operations in
            defer { operations.removeAll() }
            return operations
        }
        for (_, operation) in operations { operation.task.cancel() }
        if dialect == .legacy {
            send.yield(.text(envelope("connection_error", id: nil, payload: errorObject("The session ended: sign in again", code: "UNAUTHENTICATED"))))
        }
        send.yield(.close(.unknown(4401), "Unauthorized: the session ended"))
    }

    /// graphql-transport-ws closes the socket on a protocol error; the legacy protocol answers `error` and goes on.
    /// True when the socket is closing.
    private func reject(_ code: WebSocketErrorCode, _ reason: String, id: String?, send: GraphQLSocketOutbox) -> Bool {
        switch dialect {
        case .transportWS:
            send.yield(.close(code, reason))
            return true
        case .legacy:
            send.yield(.text(Self.envelope("error", id: id, payload: Self.errorObject(reason, code: "BAD_REQUEST"))))
            return false
        }
    }

    private func start(_ operation: GraphQLController.Operation, id: String, identity: Identity, send: GraphQLSocketOutbox) {
        let (admission, executor, credentialSource, dialect, shared) = (controller.admission, controller.executor, controller.credentials, dialect, shared)
        let rateLimit = controller.rateLimit
        let (active, channel) = (controller.metrics.activeSubscriptions, channel)
        let run = UUID()
        shared.operations.withLockedValue { operations in
            let task = Task {
                defer { shared.operations.withLockedValue { if $0[id]?.run == run { $0[id] = nil } } }
                do {
                    // Over the quota, this operation ends with an error; the socket and its other operations go on.
                    try rateLimit?.take(caller: identity.userId)
                    let admitted = try await admission.admit(
                        query: operation.query, operationName: operation.operationName, persistedQuery: operation.persistedQuery, allowMutations: true
                    )
                    let request = operation.request(running: admitted)
                    let credentials = try await credentialSource(identity)
                    if admitted.type == .subscription {
                        active.increment()
                        defer { active.decrement() }
                        switch try await executor.sharedSubscription(request, credentials: credentials) {
                        case .refused(let errors):
                            Self.fail(id, errors: errors, dialect: dialect, send: send)
                            return
                        case .joined(let membership):
                            // Results go from the feed straight to the socket, each in this operation's envelope.
                            let envelope = Self.resultEnvelope(dialect, id: id)
                            switch await membership.follow(on: channel, frame: envelope) {
                            case .closed: break
                            case .lagging:
                                send.fellBehind()
                                return
                            case .gone, .cancelled, .ended: return
                            }
                        case nil:
                            for try await event in try await executor.subscribe(request, credentials: credentials) {
                                guard !Task.isCancelled else { return }
                                switch event {
                                case .next(let result):
                                    send.yield(.text(Self.envelope(dialect.resultType, id: id, payload: result)))
                                case .refused(let errors):
                                    Self.fail(id, errors: errors, dialect: dialect, send: send)
                                    return
                                }
                            }
                        }
                    } else {
                        let reply = try await executor.execute(request, credentials: credentials)
                        guard !Task.isCancelled else { return }
                        // A request that could not run at all is an `error` in graphql-transport-ws, not a result.
                        if reply.status != .ok, dialect == .transportWS, let errors = Self.errors(in: reply.body) {
                            Self.fail(id, errors: errors, dialect: dialect, send: send)
                            return
                        }
                        send.yield(.text(Self.envelope(dialect.resultType, id: id, payload: reply.body)))
                    }
                    guard !Task.isCancelled else { return }
                    send.yield(.text(Self.envelope("complete", id: id, payload: nil)))
                } catch let refusal as GraphQLRefusal {
                    guard !Task.isCancelled else { return }
                    Self.fail(id, errors: Self.errorList(refusal.message, code: refusal.code), dialect: dialect, send: send)
                } catch is AuthenticationRequired {
                    guard !Task.isCancelled else { return }
                    Self.fail(id, errors: Self.errorList("The session ended: sign in again", code: "UNAUTHENTICATED"), dialect: dialect, send: send)
                } catch let error as GraphQLUpstreamError {
                    guard !Task.isCancelled else { return }
                    let refusal = GraphQLRefusal(upstream: error)
                    Self.fail(id, errors: Self.errorList(refusal.message, code: refusal.code), dialect: dialect, send: send)
                } catch {
                    guard !Task.isCancelled else { return }
                    Self.fail(id, errors: Self.errorList("The operation failed: \(error)", code: "INTERNAL"), dialect: dialect, send: send)
                }
            }
            operations[id] = (run, task)
        }
    }

    /// An operation that produced no result. subscriptions-transport-ws reports those as a result holding only
    /// `errors`, then `complete`; graphql-transport-ws as one `error` message with the list, which ends it.
    private static func fail(_ id: String, errors: ByteBuffer, dialect: GraphQLWebSocketDialect, send: GraphQLSocketOutbox) {
        switch dialect {
        case .transportWS:
            send.yield(.text(envelope("error", id: id, payload: errors)))
        case .legacy:
            var result = ByteBuffer(string: #"{"errors":"#)
            result.writeImmutableBuffer(errors)
            result.writeString("}")
            send.yield(.text(envelope("data", id: id, payload: result)))
            send.yield(.text(envelope("complete", id: id, payload: nil)))
        }
    }

    /// A result's text frame, made on the socket's event loop from the feed's shared bytes: the same text as
    /// `envelope(resultType, id:, payload:)`.
    static func resultEnvelope(_ dialect: GraphQLWebSocketDialect, id: String) -> @Sendable (ByteBuffer) -> WebSocketFrame {
        let head = ByteBuffer(string: #"{"type":"# + jsonString(dialect.resultType) + #","id":"# + jsonString(id) + #","payload":"#)
        return { payload in
            var text = ByteBufferAllocator().buffer(capacity: head.readableBytes + payload.readableBytes + 1)
            text.writeImmutableBuffer(head)
            text.writeImmutableBuffer(payload)
            text.writeStaticString("}")
            return WebSocketFrame(fin: true, opcode: .text, data: text)
        }
    }

    static func envelope(_ type: String, id: String?, payload: ByteBuffer?) -> String {
        var text = #"{"type":"# + jsonString(type)
        if let id { text += #","id":"# + jsonString(id) }
        if let payload { text += #","payload":"# + String(buffer: payload) }
        return text + "}"
    }

    static func errorObject(_ message: String, code: String) -> ByteBuffer {
        ByteBuffer(string: #"{"message":"# + jsonString(message) + #","extensions":{"code":"# + jsonString(code) + "}}")
    }

    static func errorList(_ message: String, code: String) -> ByteBuffer {
        var list = ByteBuffer(string: "[")
        list.writeImmutableBuffer(errorObject(message, code: code))
        list.writeString("]")
        return list
    }

    /// The `errors` list of a reply, as JSON.
    static func errors(in reply: ByteBuffer) -> ByteBuffer? {
        struct Reply: Decodable { let errors: Map? }
        guard let errors = (try? JSONDecoder().decode(Reply.self, from: Data(buffer: reply)))?.errors,
            let bytes = try? JSONEncoder().encode(errors)
        else { return nil }
        return ByteBuffer(bytes: bytes)
    }

    static func jsonString(_ value: String) -> String {
        String(decoding: (try? JSONEncoder().encode(value)) ?? Data("\"\"".utf8), as: UTF8.self)
    }
}

/// A socket's queue of outgoing messages. A client that falls more than `limit` messages behind (it stopped
/// reading, or reads slower than its subscriptions produce) is closed with 1013 rather than held in memory.
struct GraphQLSocketOutbox: Sendable {
    static let limit = 256

    enum Outgoing: Sendable {
        case text(String)
        case close(WebSocketErrorCode, String)
    }

    private let continuation: AsyncStream<Outgoing>.Continuation
    private let metrics: FoyerMetrics
    private let overflowed = NIOLockedValueBox(false)

    /// The messages, for the socket's writer, and the outbox that queues them.
    static func make(metrics: FoyerMetrics) -> (AsyncStream<Outgoing>, GraphQLSocketOutbox) {
        let (stream, continuation) = AsyncStream.makeStream(of: Outgoing.self, bufferingPolicy: .bufferingOldest(limit))
        return (stream, GraphQLSocketOutbox(continuation: continuation, metrics: metrics))
    }

    private init(continuation: AsyncStream<Outgoing>.Continuation, metrics: FoyerMetrics) {
        self.continuation = continuation
        self.metrics = metrics
    }

    func yield(_ message: Outgoing) {
        guard case .dropped = continuation.yield(message) else { return }
        let first = overflowed.withLockedValue { overflowed in
            defer { overflowed = true }
            return !overflowed
        }
        if first { metrics.laggingWebSockets.increment() }
    }

    /// A subscription written to the socket directly found it not keeping up: the socket closes as an overflowing
    /// queue would close it.
    func fellBehind() {
        let first = overflowed.withLockedValue { overflowed in
            defer { overflowed = true }
            return !overflowed
        }
        if first { metrics.laggingWebSockets.increment() }
        continuation.yield(.close(.unknown(1013), Self.fellBehindReason))
    }

    static let fellBehindReason = "Too far behind: reconnect and subscribe again"

    func finish() { continuation.finish() }
    var isOverflowed: Bool { overflowed.withLockedValue { $0 } }
}
