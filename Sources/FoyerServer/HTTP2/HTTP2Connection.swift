import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
import ServiceLifecycle

/// A TLS connection that negotiated `h2` (ALPN): each HTTP/2 stream is one request, read and answered by a task of
/// its own on the connection's event loop, with the same responder as HTTP/1.1. A browser's pages, API calls and
/// event streams then share one connection.
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
struct HTTP2Connection {
    typealias Stream = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    static let maximumConcurrentStreams = 100
    /// Flow-control windows for what clients send (picture uploads): 1 MiB per stream and for the connection,
    /// rather than the protocol's 64 KiB, which would cap an upload at 64 KiB per round trip.
    static let windowSize = 1 << 20

    let responder: HTTPChannelHandler.Responder
    let edge: Edge

    /// Sets the connection's pipeline up for HTTP/2 (after TLS and the edge's tap); gives the streams as they open.
    static func configure(_ channel: any Channel, edge: Edge, grace: Duration) throws -> NIOHTTP2Handler.AsyncStreamMultiplexer<Stream> {
        var settings = NIOHTTP2Handler.Configuration()
        settings.connection.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: maximumConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: EdgeSettings.maximumHeadBytes),
            HTTP2Setting(parameter: .initialWindowSize, value: windowSize),
        ]
        settings.connection.targetWindowSize = windowSize
        settings.stream.targetWindowSize = windowSize
        // A graceful shutdown (or the idle timeout) sends GOAWAY and a PING, then a last GOAWAY once the client has
        // answered it, and closes when the streams under way are done or the grace has passed (`serve` closes a
        // connection whose client never answers).
        let management = NIOHTTP2ServerConnectionManagementHandler.Configuration(
            maxIdleTime: edge.idleTimeout, maxAge: nil, maxGraceTime: .nanoseconds(Int64(grace.seconds * 1e9)), keepalive: nil
        )
        let operations = channel.pipeline.syncOperations
        try operations.addHandler(CoalescedFlushes())
        let streams = try operations.configureAsyncHTTP2Pipeline(
            mode: .server, connectionManagerConfiguration: management, http2HandlerConfiguration: settings
        ) { stream in
            stream.eventLoop.makeCompletedFuture {
                let operations = stream.pipeline.syncOperations
                try operations.addHandler(HTTP2FramePayloadToHTTPServerCodec())
                try operations.addHandler(HTTP2StreamRules(timeout: edge.headerTimeout))
                return try Stream(wrappingChannelSynchronously: stream)
            }
        }
        return streams
    }

    func serve(_ streams: NIOHTTP2Handler.AsyncStreamMultiplexer<Stream>, on channel: any Channel, grace: Duration, logger: Logger) async {
        edge.metrics.h2Connections.increment()
        defer { edge.metrics.h2Connections.decrement() }
        await withGracefulShutdownHandler {
            do {
                try await withThrowingDiscardingTaskGroup { group in
                    for try await stream in streams.inbound {
                        group.addTask {
                            await withTaskExecutorPreference(EventLoopTaskExecutor.on(stream.channel.eventLoop)) {
                                await answer(stream, logger: logger)
                            }
                        }
                    }
                }
            } catch {
                logger.debug("HTTP/2 connection ended: \(error)")
            }
        } onGracefulShutdown: {
            // NIO's GOAWAY waits for the client to answer its PING before the grace begins: one that never does (or
            // whose streams go on) would keep the server from stopping.
            channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(grace.seconds * 1e9))) { channel.close(promise: nil) }
        }
    }

    /// One stream: its request, answered; what is left of its body read and dropped.
    private func answer(_ stream: Stream, logger: Logger) async {
        do {
            try await withTaskCancellationHandler {
                try await stream.executeThenClose { inbound, outbound in
                    var parts = inbound.makeAsyncIterator()
                    guard let first = try await parts.next() else { return }
                    guard case .head(let head) = first else { throw HTTPConnection.UnexpectedPart(part: first) }
                    edge.metrics.requestRead(over: .h2)
                    if let refusal = refusal(of: head) {
                        try await refuse(refusal, on: outbound)
                        return
                    }
                    let request = Request(head: head, body: RequestBody(asyncSequence: RequestBodyParts(parts)))
                    try await responder(request, ResponseWriter(outbound: outbound), stream.channel)
                    while try await parts.next() != nil {}
                }
            } onCancel: {
                stream.channel.close(mode: .input, promise: nil)
            }
        } catch {
            logger.trace("HTTP/2 stream ended: \(error)")
        }
    }

    /// What the edge refuses over HTTP/1.1 and HTTP/2 does not already: too many fields, a path too long.
    private func refusal(of head: HTTPRequest) -> EdgeRefusal? {
        let json = UnfinishedHead.wantsJSON(requestTarget: (head.path ?? "").utf8, accept: head.headerFields[.accept]?.lowercased())
        if head.headerFields.count > EdgeSettings.maximumHeaderCount { return .tooManyHeaders(json: json) }
        if (head.path ?? "").utf8.count + head.method.rawValue.utf8.count + 10 > EdgeSettings.maximumRequestLineBytes { return .uriTooLong(json: json) }
        return nil
    }

    private func refuse(_ refusal: EdgeRefusal, on outbound: NIOAsyncChannelOutboundWriter<HTTPResponsePart>) async throws {
        edge.refused(refusal)
        let answer = edge.answer(refusal)
        var fields = HTTPFields()
        for header in answer.head.headers where header.name.lowercased() != "connection" {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        let response = HTTPResponse(status: .init(code: Int(answer.head.status.code)), headerFields: fields)
        try await outbound.write(contentsOf: [.head(response), .body(answer.body), .end(nil)])
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
