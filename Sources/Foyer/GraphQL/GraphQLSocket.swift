import Foundation
import FoyerServer
import GraphQL
import Hummingbird
import NIOCore
import NIOWebSocket

/// One client's GraphQL websocket, served on its connection's event loop: frames are read and answered there, and
/// what an operation needs from elsewhere (the sign-in check, admission, the executor) runs in a short-lived task
/// that hands its answer back to the loop. A shared subscription is then written by its feed's fan-out, as a live
/// stream is, so an idle socket holds no task: only this handler, its operations' ids, and one timer.
final class GraphQLSocket: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// graphql-transport-ws asks the server to close a socket that does not `connection_init` in time.
    static let initialisationTimeout: TimeAmount = .seconds(10)
    /// Legacy clients count a connection dead without `ka` messages now and then; every other tick also pings, and
    /// a socket whose client answered no ping by the next is closed (a peer that vanished without a FIN).
    static let tick: TimeAmount = .seconds(15)
    /// After our close frame, how long the client has to answer with its own before the connection is closed.
    static let closeTimeout: TimeAmount = .seconds(15)
    /// Messages written while the connection takes no more: a client this far behind (it stopped reading, or reads
    /// slower than its subscriptions produce) is closed with 1013 rather than held in memory.
    static let backlogLimit = 256
    static let fellBehindReason = "Too far behind: reconnect and subscribe again"
    /// RFC 6455 §7.4.1's "service restart": the client may reconnect (to another instance, or this one restarted).
    static let serviceRestart = WebSocketErrorCode.unknown(1012)

    private enum Phase {
        case awaitingInit
        case initialising
        case ready(Identity)
        /// Our close frame went out (or the client's was answered): nothing more is written.
        case closing
        case closed
    }

    /// A running operation. `run` tells it apart from a later one reusing its id.
    private struct Operation {
        let run: UInt64
        var task: Task<Void, Never>?
        /// Stops the shared subscription it follows from this loop.
        var stopFollowing: (() -> Void)?
    }

    private struct ClientMessage: Decodable {
        let type: String
        let id: String?
        let payload: Map?
    }

    private struct StartMessage: Decodable {
        let payload: GraphQLController.Operation
    }

    let dialect: GraphQLWebSocketDialect
    /// Kept until `connection_init` is answered: it may carry the sign-in.
    private var upgradeRequest: Request?
    private let controller: GraphQLWebSocketController
    private let trace: RequestTrace

    // Everything below is only used on the connection's event loop.
    private var context: ChannelHandlerContext?
    /// NIO's frame encoder's place in the pipeline: frames a fan-out made whole are written from there.
    private var encoder: ChannelHandlerContext?
    private var phase = Phase.awaitingInit
    /// What came in while the sign-in was checked, answered after it; no more is read meanwhile.
    private var pending: [String] = []
    private var heldRead = false
    private var operations: [String: Operation] = [:]
    private var lastRun: UInt64 = 0
    private var releaseHold: SessionHolds.Release?
    private var initialisationTimer: Scheduled<Void>?
    private var ticker: RepeatedTask?
    private var ticks = 0
    private var awaitingPong = false
    /// A text or binary message whose continuation frames are still coming.
    private var fragments: (text: Bool, bytes: ByteBuffer)?
    private var backlog = 0
    private var countedLagging = false

    /// Upgraded after other requests (`KeptAliveUpgrade`): the handlers behind it are the finished HTTP side's, which
    /// pass no read on, so the socket asks for each read itself.
    private let readsItself: Bool

    init(dialect: GraphQLWebSocketDialect, upgradeRequest: Request, controller: GraphQLWebSocketController, readsItself: Bool = false) {
        self.readsItself = readsItself
        self.dialect = dialect
        self.upgradeRequest = upgradeRequest
        self.controller = controller
        trace = RequestTrace(continuing: upgradeRequest.headers, fallbackID: RequestTrace.newRequestID())
    }

    // MARK: The connection

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        encoder = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
        controller.metrics.openWebSockets.increment()
        initialisationTimer = context.eventLoop.scheduleTask(in: Self.initialisationTimeout) { [self] in
            switch phase {
            case .awaitingInit, .initialising: close(.unknown(4408), "Connection initialisation timeout")
            case .ready, .closing, .closed: break
            }
        }
        ticker = context.eventLoop.scheduleRepeatedTask(initialDelay: Self.tick, delay: Self.tick) { [self] _ in tick() }
        if readsItself { context.read() }
        // A socket opened as the server began shutting down ends at once.
        if context.pipeline.syncOperations.serverIsQuiescing {
            close(Self.serviceRestart, "The server is restarting: reconnect")
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        ended()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        ended()
        self.context = nil
        encoder = nil
    }

    /// The connection is gone: what runs for it stops, and what it held is let go. Once.
    private func ended() {
        if case .closed = phase { return }
        phase = .closed
        initialisationTimer?.cancel()
        ticker?.cancel()
        releaseHold?()
        releaseHold = nil
        stopAllOperations()
        pending = []
        controller.metrics.openWebSockets.decrement()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if readsItself { read(context: context) }
        context.fireChannelReadComplete()
    }

    /// While `connection_init` is checked the client is not read: what it sent meanwhile waits in `pending`, which
    /// one read bounds.
    func read(context: ChannelHandlerContext) {
        if case .initialising = phase {
            heldRead = true
        } else {
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // Each socket at its own moment of the grace: their clients reconnect spread out, not all at once.
            context.eventLoop.scheduleTask(in: controller.drain.endingDelay()) {
                self.close(Self.serviceRestart, "The server is restarting: reconnect")
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // NIO's protocol handler before this one already answered a bad frame with a close; a broken connection closes.
        context.close(promise: nil)
    }

    // MARK: Frames

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        // No extension is negotiated, so no reserved bit may be set.
        guard frame.reservedBits.isEmpty else { return failConnection(.protocolError) }
        switch frame.opcode {
        case .connectionClose:
            receivedClose(frame)
        case .ping:
            guard frame.fin else { return failConnection(.protocolError) }
            write(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData))
        case .pong:
            awaitingPong = false
        case .text, .binary:
            guard fragments == nil else { return failConnection(.protocolError) }
            if frame.fin {
                received(frame.unmaskedData, text: frame.opcode == .text)
            } else {
                fragments = (frame.opcode == .text, frame.unmaskedData)
            }
        case .continuation:
            guard var message = fragments else { return failConnection(.protocolError) }
            // Taken out while it grows, so that its bytes are not copied once per frame.
            fragments = nil
            var data = frame.unmaskedData
            guard message.bytes.readableBytes + data.readableBytes <= GraphQLController.maximumBodySize else {
                return failConnection(.messageTooLarge)
            }
            message.bytes.writeBuffer(&data)
            fragments = frame.fin ? nil : message
            if frame.fin { received(message.bytes, text: message.text) }
        default:
            failConnection(.protocolError)
        }
    }

    private func receivedClose(_ frame: WebSocketFrame) {
        guard let context else { return }
        if case .closing = phase {
            // The answer to ours: the handshake is over.
            context.close(promise: nil)
            return
        }
        // Answered with the client's own code (RFC 6455 §5.5.1), then the server closes the connection.
        var data = frame.unmaskedData
        let code = data.readableBytes >= 2 ? data.readSlice(length: 2) : nil
        phase = .closing
        stopAllOperations()
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: code ?? ByteBuffer())))
            .whenComplete { _ in channel.close(promise: nil) }
    }

    /// A frame this socket cannot go on from: closed with `code` and no waiting for the client's answer.
    private func failConnection(_ code: WebSocketErrorCode) {
        close(code, nil)
        context?.close(promise: nil)
    }

    /// Every other tick pings the client; legacy sockets hear `ka` on every one.
    private func tick() {
        ticks += 1
        if case .ready = phase, dialect == .legacy { send(#"{"type":"ka"}"#) }
        guard ticks.isMultiple(of: 2) else { return }
        if awaitingPong {
            failConnection(.goingAway)
            return
        }
        awaitingPong = true
        write(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(integer: UInt64(ticks))))
    }

    // MARK: The protocol

    private func received(_ bytes: ByteBuffer, text: Bool) {
        switch phase {
        case .closing, .closed: return
        case .initialising:
            // Answered in order once the sign-in is known.
            pending.append(text ? String(buffer: bytes) : "")
            return
        case .awaitingInit, .ready: break
        }
        let text = text ? String(buffer: bytes) : ""
        handle(text)
    }

    private func handle(_ text: String) {
        guard let message = try? JSONDecoder().decode(ClientMessage.self, from: Data(text.utf8)) else {
            return reject(.unknown(4400), "Messages must be JSON objects with a type", id: nil)
        }
        switch message.type {
        case "connection_init":
            guard case .awaitingInit = phase else { return reject(.unknown(4429), "Too many initialisation requests", id: nil) }
            guard let eventLoop = context?.eventLoop, let upgradeRequest else { return }
            phase = .initialising
            let (controller, payload, trace) = (controller, message.payload, trace)
            Task {
                await RequestTrace.$current.withValue(trace) {
                    do {
                        let identity = try await controller.authenticate(initPayload: payload, upgradeRequest: upgradeRequest)
                        eventLoop.execute { self.initialised(identity) }
                    } catch {
                        eventLoop.execute { self.close(.unexpectedServerError, "The sign-in could not be checked: try again") }
                    }
                }
            }
        case "ping" where dialect == .transportWS:
            send(#"{"type":"pong"}"#)
        case "pong" where dialect == .transportWS:
            break
        case "connection_terminate" where dialect == .legacy:
            close(.normalClosure, "Terminated")
        case dialect.startType:
            guard case .ready(let identity) = phase else { return reject(.unknown(4401), "Unauthorized", id: message.id) }
            guard let id = message.id, !id.isEmpty,
                let operation = try? JSONDecoder().decode(StartMessage.self, from: Data(text.utf8)).payload
            else {
                return reject(.unknown(4400), "\(dialect.startType) needs an id and a payload {\"query\": …}", id: message.id)
            }
            if operations[id] != nil { return reject(.unknown(4409), "Subscriber for \(id) already exists", id: id) }
            start(operation, id: id, identity: identity)
        case dialect.stopType:
            guard let id = message.id, let operation = operations.removeValue(forKey: id) else { return }
            stop(operation)
            // subscriptions-transport-ws confirms a stop with `complete`; graphql-transport-ws must say nothing more.
            if dialect == .legacy { send(Self.envelope("complete", id: id, payload: nil)) }
        default:
            reject(.unknown(4400), "Unknown message type \(message.type)", id: message.id)
        }
    }

    private func initialised(_ identity: Identity?) {
        guard case .initialising = phase else { return }
        guard let identity else {
            let reason = "Sign in first: give Authorization: Bearer <X-Session-Token> in the connection_init payload"
            if dialect == .legacy {
                send(Self.envelope("connection_error", id: nil, payload: Self.errorObject(reason, code: "UNAUTHENTICATED")))
                close(.normalClosure, "Unauthenticated")
            } else {
                close(.unknown(4403), "Forbidden")
            }
            return
        }
        phase = .ready(identity)
        upgradeRequest = nil
        initialisationTimer?.cancel()
        initialisationTimer = nil
        if let session = identity.session, let eventLoop = context?.eventLoop {
            releaseHold = controller.holds.hold(session) { eventLoop.execute { self.sessionEnded() } }
        }
        send(#"{"type":"connection_ack"}"#)
        if dialect == .legacy { send(#"{"type":"ka"}"#) }
        let waiting = pending
        pending = []
        for text in waiting { handle(text) }
        releaseHeldRead()
    }

    private func releaseHeldRead() {
        guard heldRead, let context else { return }
        heldRead = false
        context.read()
    }

    /// The socket's session ended (signed out, revoked, expired): its operations stop, nothing new may start, and
    /// the socket closes with 4401 (the legacy protocol hears `connection_error` first, having no close codes).
    private func sessionEnded() {
        guard case .ready = phase else { return }
        stopAllOperations()
        if dialect == .legacy {
            send(Self.envelope("connection_error", id: nil, payload: Self.errorObject("The session ended: sign in again", code: "UNAUTHENTICATED")))
        }
        close(.unknown(4401), "Unauthorized: the session ended")
    }

    /// graphql-transport-ws closes the socket on a protocol error; the legacy protocol answers `error` and goes on.
    private func reject(_ code: WebSocketErrorCode, _ reason: String, id: String?) {
        switch dialect {
        case .transportWS: close(code, reason)
        case .legacy: send(Self.envelope("error", id: id, payload: Self.errorObject(reason, code: "BAD_REQUEST")))
        }
    }

    // MARK: Operations

    private func start(_ operation: GraphQLController.Operation, id: String, identity: Identity) {
        guard let eventLoop = context?.eventLoop else { return }
        lastRun += 1
        let run = lastRun
        let (controller, dialect, trace) = (controller, dialect, trace)
        // In a task of its own that ends with its answer: this socket's loop writes what it gives.
        let task = Task {
            await RequestTrace.$current.withValue(trace) {
                let finish: @Sendable (_ messages: [String]) -> Void = { messages in eventLoop.execute { self.finish(id, run, with: messages) } }
                let fail: @Sendable (_ message: String, _ code: String) -> Void = { message, code in
                    finish(Self.failure(id, errors: Self.errorList(message, code: code), dialect: dialect))
                }
                do {
                    // Over the quota, this operation ends with an error; the socket and its other operations go on.
                    try controller.rateLimit?.take(caller: identity.userId)
                    let admitted = try await controller.admission.admit(
                        query: operation.query, operationName: operation.operationName, persistedQuery: operation.persistedQuery, allowMutations: true
                    )
                    let request = operation.request(running: admitted)
                    let credentials = try await controller.credentials(identity)
                    if admitted.type == .subscription {
                        switch try await controller.executor.sharedSubscription(request, credentials: credentials) {
                        case .refused(let errors):
                            finish(Self.failure(id, errors: errors, dialect: dialect))
                        case .joined(let membership):
                            eventLoop.execute { self.follow(membership, id: id, run: run) }
                        case nil:
                            // An upstream's own subscription: this task relays it for as long as it runs.
                            controller.metrics.activeSubscriptions.increment()
                            defer { controller.metrics.activeSubscriptions.decrement() }
                            for try await event in try await controller.executor.subscribe(request, credentials: credentials) {
                                switch event {
                                case .next(let result):
                                    let message = Self.envelope(dialect.resultType, id: id, payload: result)
                                    eventLoop.execute { self.send(message, for: id, run: run) }
                                case .refused(let errors):
                                    finish(Self.failure(id, errors: errors, dialect: dialect))
                                    return
                                }
                            }
                            finish([Self.envelope("complete", id: id, payload: nil)])
                        }
                    } else {
                        let reply = try await controller.executor.execute(request, credentials: credentials)
                        // A request that could not run at all is an `error` in graphql-transport-ws, not a result.
                        if reply.status != .ok, dialect == .transportWS, let errors = Self.errors(in: reply.body) {
                            finish(Self.failure(id, errors: errors, dialect: dialect))
                        } else {
                            finish([Self.envelope(dialect.resultType, id: id, payload: reply.body), Self.envelope("complete", id: id, payload: nil)])
                        }
                    }
                } catch let refusal as GraphQLRefusal {
                    fail(refusal.message, refusal.code)
                } catch is AuthenticationRequired {
                    fail("The session ended: sign in again", "UNAUTHENTICATED")
                } catch let error as GraphQLUpstreamError {
                    let refusal = GraphQLRefusal(upstream: error)
                    fail(refusal.message, refusal.code)
                } catch is CancellationError {
                    finish([])
                } catch {
                    fail("The operation failed: \(error)", "INTERNAL")
                }
            }
        }
        operations[id] = Operation(run: run, task: task)
    }

    /// A shared subscription joined: its results go from the feed's fan-out straight to this connection, each in
    /// this operation's envelope, and the task that joined it is already over.
    private func follow(_ membership: SharedSubscriptions.Membership, id: String, run: UInt64) {
        guard let channel = context?.channel, operations[id]?.run == run else { return }
        controller.metrics.activeSubscriptions.increment()
        let subscriber = membership.follow(
            on: channel, write: { self.writeResult($0) }, flush: { self.encoder?.flush() }, framing: Self.resultFraming(dialect, id: id)
        ) { [active = controller.metrics.activeSubscriptions] ending in
            active.decrement()
            switch ending {
            case .closed: self.finish(id, run, with: [Self.envelope("complete", id: id, payload: nil)])
            case .lagging: self.fellBehind()
            case .gone, .cancelled, .ended: self.finish(id, run, with: [])
            }
        }
        operations[id]?.task = nil
        operations[id]?.stopFollowing = { membership.stop(subscriber, on: channel.eventLoop) }
    }

    /// The operation's last messages, if it is still the one running under its id.
    private func finish(_ id: String, _ run: UInt64, with messages: [String]) {
        guard operations[id]?.run == run else { return }
        operations[id] = nil
        for message in messages { send(message) }
    }

    private func send(_ message: String, for id: String, run: UInt64) {
        guard operations[id]?.run == run else { return }
        send(message)
    }

    private func stop(_ operation: Operation) {
        operation.task?.cancel()
        operation.stopFollowing?()
    }

    private func stopAllOperations() {
        let stopping = operations
        operations = [:]
        for operation in stopping.values { stop(operation) }
    }

    // MARK: Writing

    private func send(_ text: String) {
        guard let context else { return }
        write(WebSocketFrame(fin: true, opcode: .text, data: context.channel.allocator.buffer(string: text)))
    }

    private func write(_ frame: WebSocketFrame) {
        switch phase {
        case .closing, .closed: return
        case .awaitingInit, .initialising, .ready: break
        }
        guard let context else { return }
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        countBacklog(context.channel)
    }

    /// A shared subscription's result, already a whole frame (`resultFraming`), written by the feed's fan-out
    /// (which flushes) from NIO's frame encoder on, past it.
    private func writeResult(_ frame: ByteBuffer) {
        guard case .ready = phase, let encoder else { return }
        encoder.write(NIOAny(frame), promise: nil)
    }

    private func countBacklog(_ channel: any Channel) {
        backlog = channel.isWritable ? 0 : backlog + 1
        if backlog > Self.backlogLimit { fellBehind() }
    }

    /// The client is not keeping up: the socket closes, counted once.
    private func fellBehind() {
        if !countedLagging {
            countedLagging = true
            controller.metrics.laggingWebSockets.increment()
        }
        close(.unknown(1013), Self.fellBehindReason)
    }

    /// Sends our close frame (once) and waits for the client's answer, at most `closeTimeout`.
    private func close(_ code: WebSocketErrorCode, _ reason: String?) {
        switch phase {
        case .closing, .closed: return
        case .awaitingInit, .initialising, .ready: break
        }
        guard let context else { return }
        phase = .closing
        stopAllOperations()
        var data = context.channel.allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        data.write(webSocketErrorCode: code)
        if let reason { data.writeString(reason) }
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: nil)
        // The client's answering close is read.
        releaseHeldRead()
        let channel = context.channel
        context.eventLoop.scheduleTask(in: Self.closeTimeout) { channel.close(promise: nil) }
    }

    // MARK: Messages

    /// An operation that produced no result. subscriptions-transport-ws reports those as a result holding only
    /// `errors`, then `complete`; graphql-transport-ws as one `error` message with the list, which ends it.
    static func failure(_ id: String, errors: ByteBuffer, dialect: GraphQLWebSocketDialect) -> [String] {
        switch dialect {
        case .transportWS:
            return [envelope("error", id: id, payload: errors)]
        case .legacy:
            var result = ByteBuffer(string: #"{"errors":"#)
            result.writeImmutableBuffer(errors)
            result.writeString("}")
            return [envelope("data", id: id, payload: result), envelope("complete", id: id, payload: nil)]
        }
    }

    /// A result as a whole text frame, unmasked as a server's are: the same text as `envelope(resultType, id:,
    /// payload:)`. Made once per result for every socket following it with this dialect and id.
    static func resultFraming(_ dialect: GraphQLWebSocketDialect, id: String) -> LiveChannel.Connection.Framing {
        let head = ByteBuffer(string: #"{"type":"# + jsonString(dialect.resultType) + #","id":"# + jsonString(id) + #","payload":"#)
        return LiveChannel.Connection.Framing(key: dialect.rawValue + " " + id) { payload in
            let length = head.readableBytes + payload.readableBytes + 1
            var frame = ByteBufferAllocator().buffer(capacity: length + 10)
            frame.writeInteger(UInt8(0x81))  // FIN, text
            if length < 126 {
                frame.writeInteger(UInt8(length))
            } else if length <= Int(UInt16.max) {
                frame.writeInteger(UInt8(126))
                frame.writeInteger(UInt16(length))
            } else {
                frame.writeInteger(UInt8(127))
                frame.writeInteger(UInt64(length))
            }
            frame.writeImmutableBuffer(head)
            frame.writeImmutableBuffer(payload)
            frame.writeStaticString("}")
            return frame
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
