import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
import ServiceLifecycle

/// A TLS connection that negotiated `h2` (ALPN): each HTTP/2 stream is one request, answered by a task of its own on
/// the connection's event loop (`HTTP2StreamAnswer`), with the same application as HTTP/1.1. A browser's pages, API
/// calls and event streams then share one connection.
///
/// h2's own attacks are answered by swift-nio-http2 with the limits set here: at most `maximumConcurrentStreams`
/// open at once (a client that opens more than it was told has its connection closed), header blocks of at most `EdgeSettings.maximumHeadBytes`
/// (`SETTINGS_MAX_HEADER_LIST_SIZE`), rapid reset (CVE-2023-44487: streams reset by the client are counted, and a
/// connection resetting more than NIO's limit in its window is closed), CONTINUATION floods (a bounded number of
/// frames per header block), floods of control frames, and flow control (what a client does not read stays within
/// its window). On each stream `HTTP2StreamRules` keeps the edge's clocks: a body that pauses, or a response the
/// client does not read, for longer than the header timeout resets the stream. A connection with no stream open
/// is closed after the idle timeout; a graceful shutdown sends GOAWAY and lets the streams under way finish.
/// Websockets stay on HTTP/1.1: no extended CONNECT is offered, so browsers open an HTTP/1.1 connection for them.
enum HTTP2Connection {
    /// The application's answer to one request, with the fields every response carries.
    typealias Answer = @Sendable (Request, any Channel) async throws -> Response

    static let maximumConcurrentStreams = 100
    /// Flow-control windows for what clients send (picture uploads): 1 MiB per stream and for the connection,
    /// rather than the protocol's 64 KiB, which would cap an upload at 64 KiB per round trip.
    static let windowSize = 1 << 20

    /// What a connection's streams hand to its task to run: their answers run as child tasks of the connection's
    /// (a graceful shutdown reaches them, as it reaches an HTTP/1.1 connection's), until the connection closes.
    final class StreamTasks: Sendable {
        typealias Work = @Sendable () async -> Void
        let works: AsyncStream<Work>
        let continuation: AsyncStream<Work>.Continuation

        init() {
            (works, continuation) = AsyncStream.makeStream()
        }

        func run(_ work: @escaping Work) { continuation.yield(work) }
    }

    /// Sets the connection's pipeline up for HTTP/2 (after TLS and the edge's tap), each stream to be answered as
    /// it opens; gives what its streams hand over, for `serve`.
    static func configure(_ channel: any Channel, edge: Edge, answer: @escaping Answer, grace: Duration, logger: Logger) throws -> StreamTasks {
        let tasks = StreamTasks()
        channel.closeFuture.whenComplete { _ in tasks.continuation.finish() }
        var connection = NIOHTTP2Handler.ConnectionConfiguration()
        connection.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: maximumConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: EdgeSettings.maximumHeadBytes),
            HTTP2Setting(parameter: .initialWindowSize, value: windowSize),
        ]
        connection.targetWindowSize = windowSize
        var stream = NIOHTTP2Handler.StreamConfiguration()
        stream.targetWindowSize = windowSize
        // A graceful shutdown (or the idle timeout) sends GOAWAY and a PING, then a last GOAWAY once the client has
        // answered it, and closes when the streams under way are done or the grace has passed (`serve` closes a
        // connection whose client never answers).
        let management = NIOHTTP2ServerConnectionManagementHandler(
            eventLoop: channel.eventLoop,
            configuration: .init(maxIdleTime: edge.idleTimeout, maxAge: nil, maxGraceTime: .nanoseconds(Int64(grace.seconds * 1e9)), keepalive: nil)
        )
        let http2 = NIOHTTP2Handler(
            mode: .server, eventLoop: channel.eventLoop, connectionConfiguration: connection, streamConfiguration: stream,
            streamDelegate: management.http2StreamDelegate
        ) { stream in
            stream.eventLoop.makeCompletedFuture {
                let operations = stream.pipeline.syncOperations
                try operations.addHandler(HTTP2FramePayloadToHTTPServerCodec())
                try operations.addHandler(HTTP2StreamRules(timeout: edge.headerTimeout))
                try operations.addHandler(HTTP2StreamAnswer(edge: edge, answer: answer, tasks: tasks, logger: logger))
            }
        }
        let operations = channel.pipeline.syncOperations
        try operations.addHandler(CoalescedFlushes())
        try operations.addHandler(http2)
        try operations.addHandler(management)
        return tasks
    }

    /// Until the connection closes and its streams are answered, each by a task of its own on its event loop.
    static func serve(_ channel: any Channel, tasks: StreamTasks, edge: Edge, grace: Duration) async {
        edge.metrics.h2Connections.increment()
        defer { edge.metrics.h2Connections.decrement() }
        let loop = EventLoopTaskExecutor.on(channel.eventLoop)
        await withGracefulShutdownHandler {
            // On the connection's event loop, as its streams are: taking each from its handler is no thread hop.
            await withTaskExecutorPreference(loop) {
                await withDiscardingTaskGroup { group in
                    for await work in tasks.works {
                        group.addTask(executorPreference: loop) { await work() }
                    }
                }
            }
        } onGracefulShutdown: {
            // NIO's GOAWAY waits for the client to answer its PING before the grace begins: one that never does (or
            // whose streams go on) would keep the server from stopping.
            channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(grace.seconds * 1e9))) { channel.close(promise: nil) }
        }
    }
}

/// One HTTP/2 stream's request: read, handed to a task of its own (a child of the connection's, on its event loop),
/// and its answer written straight to the stream. No async channel: a stream would pay for one (its writer, its
/// inbound sequence, their generic code looked up at run time) for a single request. A body that ended in the read
/// that brought the head (most requests) is handed over whole; one still coming is read as the route asks for it,
/// the stream's window closing meanwhile. Once the answer is written, what is left of the body is read and dropped.
final class HTTP2StreamAnswer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    typealias Body = NIOThrowingAsyncSequenceProducer<
        ByteBuffer, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, BodyDemand
    >

    private let edge: Edge
    private let answer: HTTP2Connection.Answer
    private let tasks: HTTP2Connection.StreamTasks
    private let logger: Logger
    private var head: HTTPRequest?
    /// The body read before the task started.
    private var received: ByteBuffer?
    private var ended = false
    private var started = false
    /// A body still coming when the task started; nil once the answer is written (the rest is dropped).
    private var body: Body.Source?
    /// The route has all it can hold of the body for now: the stream is not read until it takes some.
    private var paused = false
    private var readHeld = false
    private var context: ChannelHandlerContext?

    init(edge: Edge, answer: @escaping HTTP2Connection.Answer, tasks: HTTP2Connection.StreamTasks, logger: Logger) {
        (self.edge, self.answer, self.tasks, self.logger) = (edge, answer, tasks, logger)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            guard self.head == nil else { return context.close(promise: nil) }
            self.head = head
            edge.metrics.requestRead(over: .h2)
        case .body(var buffer):
            if let body {
                if case .stopProducing = body.yield(buffer) { paused = true }
            } else if !started {
                received.setOrWriteBuffer(&buffer)
            }
        case .end:
            ended = true
            body?.finish()
            body = nil
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if !started, let head { start(head, context: context) }
        context.fireChannelReadComplete()
    }

    /// A stream reset or closed: a route reading its body fails, one writing its answer fails at its next write.
    func channelInactive(context: ChannelHandlerContext) {
        body?.finish(CancellationError())
        body = nil
        context.fireChannelInactive()
    }

    func read(context: ChannelHandlerContext) {
        if paused {
            readHeld = true
        } else {
            context.read()
        }
    }

    private func start(_ head: HTTPRequest, context: ChannelHandlerContext) {
        started = true
        let channel = context.channel
        if let refusal = refusal(of: head) {
            refuse(refusal, context: context)
            return
        }
        let requestBody: RequestBody
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        if ended {
            requestBody = RequestBody(buffer: received ?? ByteBuffer())
        } else {
            let made = Body.makeSequence(
                backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8), finishOnDeinit: false,
                delegate: BodyDemand(resume: { channel.eventLoop.execute { handler.value.resume() } })
            )
            body = made.source
            if let received, case .stopProducing = made.source.yield(received) { paused = true }
            requestBody = RequestBody(asyncSequence: made.sequence)
        }
        received = nil
        let (answer, logger) = (self.answer, self.logger)
        tasks.run {
            do {
                let response = try await answer(Request(head: head, body: requestBody), channel)
                channel.write(HTTPResponsePart.head(response.head), promise: nil)
                try await response.body.write(StreamBodyWriter(channel: channel))
                channel.eventLoop.execute { handler.value.dropRestOfBody() }
            } catch {
                logger.trace("HTTP/2 stream ended: \(error)")
                channel.close(promise: nil)
            }
        }
    }

    /// The route takes more of the body.
    private func resume() {
        paused = false
        if readHeld, let context {
            readHeld = false
            context.read()
        }
    }

    /// The answer is written: what the route left of the body is read and dropped, so the stream ends cleanly.
    private func dropRestOfBody() {
        body?.finish()
        body = nil
        resume()
    }

    /// What the edge refuses over HTTP/1.1 and HTTP/2 does not already: too many fields, a path too long.
    private func refusal(of head: HTTPRequest) -> EdgeRefusal? {
        let json = UnfinishedHead.wantsJSON(requestTarget: (head.path ?? "").utf8, accept: head.headerFields[.accept]?.lowercased())
        if head.headerFields.count > EdgeSettings.maximumHeaderCount { return .tooManyHeaders(json: json) }
        if (head.path ?? "").utf8.count + head.method.rawValue.utf8.count + 10 > EdgeSettings.maximumRequestLineBytes { return .uriTooLong(json: json) }
        return nil
    }

    private func refuse(_ refusal: EdgeRefusal, context: ChannelHandlerContext) {
        edge.refused(refusal)
        let answer = edge.answer(refusal)
        var fields = HTTPFields()
        for header in answer.head.headers where header.name.lowercased() != "connection" {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        let response = HTTPResponse(status: .init(code: Int(answer.head.status.code)), headerFields: fields)
        context.write(wrapOutboundOut(.head(response)), promise: nil)
        context.write(wrapOutboundOut(.body(answer.body)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
    }

    /// Tells the stream's handler when the route wants more of a body it paused.
    struct BodyDemand: NIOAsyncSequenceProducerDelegate {
        let resume: @Sendable () -> Void
        func produceMore() { resume() }
        func didTerminate() {}
    }

    /// Writes a response's body to its stream: each write goes out at once, and the next waits for it (what a slow
    /// client does not read holds the route back, as on HTTP/1.1). The end is not waited for.
    struct StreamBodyWriter: ResponseBodyWriter {
        let channel: any Channel
        var inFlight: EventLoopFuture<Void>?

        init(channel: any Channel) {
            self.channel = channel
        }

        mutating func write(_ buffer: ByteBuffer) async throws {
            if let inFlight { try await inFlight.get() }
            inFlight = channel.writeAndFlush(HTTPResponsePart.body(buffer))
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
            channel.writeAndFlush(HTTPResponsePart.end(trailingHeaders), promise: nil)
        }
    }
}

/// On each HTTP/2 stream: the edge's clocks (a request body that pauses, or a response its client does not read, for
/// longer than the header timeout resets the stream), and the response's fields made fit for HTTP/2, which forbids
/// those about the connection (RFC 9113 §8.2.2): what says `Connection: close` to an HTTP/1.1 client (a drain, a
/// refusal) says nothing here.
final class HTTP2StreamRules: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    static let connectionFields: [HTTPField.Name] = [.connection, .transferEncoding, .upgrade, HTTPField.Name("Keep-Alive")!, HTTPField.Name("Proxy-Connection")!]

    private let timeout: TimeAmount
    /// While the request's body is under way: when it last moved.
    private var bodyMoved: NIODeadline?
    private var unwritableSince: NIODeadline?
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head, .body: bodyMoved = context.eventLoop.now
        case .end: bodyMoved = nil
        }
        context.fireChannelRead(data)
    }

    /// A request whose end came in the same read (most: a GET's head and end are one frame) needs no clock.
    func channelReadComplete(context: ChannelHandlerContext) {
        if bodyMoved != nil { arm(context) }
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            unwritableSince = nil
        } else if unwritableSince == nil {
            unwritableSince = context.eventLoop.now
            arm(context)
        }
        context.fireChannelWritabilityChanged()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .head(var response) = unwrapOutboundIn(data) else {
            context.write(data, promise: promise)
            return
        }
        for name in Self.connectionFields { response.headerFields[name] = nil }
        context.write(wrapOutboundOut(.head(response)), promise: promise)
    }

    /// Checks again at the earliest deadline of the clocks running.
    private func arm(_ context: ChannelHandlerContext) {
        guard timer == nil, let deadline = [bodyMoved, unwritableSince].compactMap({ $0 }).min().map({ $0 + timeout }) else { return }
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            timer = nil
            let now = context.eventLoop.now
            if let bodyMoved, now >= bodyMoved + timeout { return context.close(promise: nil) }
            if let unwritableSince, now >= unwritableSince + timeout { return context.close(promise: nil) }
            arm(context)
        }
    }
}
