import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOConcurrencyHelpers
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOSSL
import NIOTLS
import Synchronization

/// What the edge refuses, each with the status a client gets (in JSON or HTML, as far as its request line said which).
public enum EdgeRefusal: Hashable, Sendable {
    case requestTimeout(json: Bool)
    case uriTooLong(json: Bool)
    case headTooLarge(json: Bool)
    case tooManyHeaders(json: Bool)
    case trailersTooLarge(json: Bool)
    /// What NIO's parser could not read as HTTP/1.1: `Content-Length` with chunked framing, two lengths, bad chunk sizes…
    case malformed(json: Bool)
    /// HTTP/1.1 without exactly one `Host` (RFC 9112 §3.2).
    case missingHost(json: Bool)

    public var status: HTTPResponse.Status {
        switch self {
        case .requestTimeout: .requestTimeout
        case .uriTooLong: .uriTooLong
        case .headTooLarge, .tooManyHeaders, .trailersTooLarge: .requestHeaderFieldsTooLarge
        case .malformed, .missingHost: .badRequest
        }
    }

    public var json: Bool {
        switch self {
        case .requestTimeout(let json), .uriTooLong(let json), .headTooLarge(let json), .tooManyHeaders(let json),
            .trailersTooLarge(let json), .malformed(let json), .missingHost(let json):
            json
        }
    }

    var metricsReason: String {
        switch self {
        case .requestTimeout: "timeout"
        case .uriTooLong: "uri_too_long"
        case .headTooLarge: "head_too_large"
        case .tooManyHeaders: "too_many_headers"
        case .trailersTooLarge: "trailers_too_large"
        case .malformed: "malformed"
        case .missingHost: "missing_host"
        }
    }

    public static let all: [EdgeRefusal] = [true, false].flatMap { json in
        [
            .requestTimeout(json: json), .uriTooLong(json: json), .headTooLarge(json: json), .tooManyHeaders(json: json),
            .trailersTooLarge(json: json), .malformed(json: json), .missingHost(json: json),
        ]
    }
}

/// Open client connections, against the cap.
public final class EdgeConnections: Sendable {
    let cap: Int
    private let count = Atomic<Int>(0)
    /// The most open at once since `takePeak` last asked.
    private let peak = Atomic<Int>(0)
    private let metrics: ServerMetrics

    init(cap: Int, metrics: ServerMetrics) {
        self.cap = cap
        self.metrics = metrics
    }

    /// Counts a new connection; false (and counted as refused) when that would pass the cap.
    func open() -> Bool {
        let now = count.add(1, ordering: .relaxed).newValue
        guard now <= cap else {
            count.subtract(1, ordering: .relaxed)
            metrics.refusedConnections.increment()
            return false
        }
        metrics.openConnections.increment()
        var seen = peak.load(ordering: .relaxed)
        while now > seen {
            let (raised, found) = peak.compareExchange(expected: seen, desired: now, ordering: .relaxed)
            if raised { break }
            seen = found
        }
        return true
    }

    /// Client connections open now.
    public var openCount: Int { count.load(ordering: .relaxed) }

    /// The most connections open at once since the last call, and how many are open now (the next peak starts there).
    public func takePeak() -> (peak: Int, open: Int) {
        let open = count.load(ordering: .relaxed)
        return (max(peak.exchange(open, ordering: .relaxed), open), open)
    }

    func closed() {
        count.subtract(1, ordering: .relaxed)
        metrics.openConnections.decrement()
    }
}

/// The edge of one application: its settings, its open connections, and the answers to what it refuses, each
/// made once at start (pages included, by whoever assembles the server: it knows the views and languages).
public final class Edge: Sendable {
    let headerTimeout: TimeAmount
    public let idleTimeout: TimeAmount
    public let connections: EdgeConnections
    private let answers: [EdgeRefusal: EdgeAnswer]
    let metrics: ServerMetrics

    public init(settings: EdgeSettings, metrics: ServerMetrics, answer: (EdgeRefusal) -> EdgeAnswer) {
        headerTimeout = .nanoseconds(Int64(settings.headerTimeout.seconds * 1e9))
        idleTimeout = .nanoseconds(Int64(settings.idleTimeout.seconds * 1e9))
        connections = EdgeConnections(cap: settings.connectionCap, metrics: metrics)
        self.metrics = metrics
        answers = Dictionary(uniqueKeysWithValues: EdgeRefusal.all.map { ($0, answer($0)) })
    }

    func answer(_ refusal: EdgeRefusal) -> EdgeAnswer { answers[refusal]! }

    func refused(_ refusal: EdgeRefusal) { metrics.edgeRefused(refusal) }
}

/// A refusal's whole response, `Connection: close` (the connection ends after it): made once, and written through
/// NIO's encoder like any other.
public struct EdgeAnswer: Sendable {
    let head: HTTPResponseHead
    let body: ByteBuffer

    public init(head: HTTPResponseHead, body: ByteBuffer) {
        self.head = head
        self.body = body
    }
}

/// Each connection: HTTP/1.1 with the websocket upgrades served (`WebSocketUpgrades`), and the edge on it (its tap
/// before NIO's decoder, its rules right after it). Requests are read by `HTTPConnection`; an upgraded connection is
/// handed to its socket on its event loop and keeps no task. (Hummingbird's websocket channel runs each socket in a
/// task group of its own for as long as it is open.)
public struct EdgeGuardedChannel: ServerChildChannel {
    public struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        public let channel: any Channel
    }

    /// What NIO's upgrader made of a connection's first request.
    enum Negotiated: Sendable {
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// An upgrade asked for without a subprotocol served (or a broken websocket handshake).
        case refusedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// Served on its event loop from now on.
        case webSocket
        /// TLS that negotiated `h2`: what its streams hand over to be run, as they open.
        case http2(HTTP2Connection.StreamTasks)
    }

    let responder: HTTPChannelHandler.Responder
    let http1: HTTP1Channel.Configuration
    /// Nil on the plain-HTTP port beside HTTPS (only the redirect there), and where no websocket is served.
    let webSockets: WebSocketUpgrades?
    let edge: Edge
    /// HTTPS: each connection's TLS comes first, everything else (the tap included) sees what it decrypts; and
    /// what answers an HTTP/2 stream's request (the application `responder` writes for, without its writer), so
    /// that every TLS connection that negotiates h2 gets it.
    var tls: (certificates: any ServedCertificates, answer: HTTP2Connection.Answer)? = nil
    /// How long an HTTP/2 connection's streams may go on after a graceful shutdown's GOAWAY before it is closed.
    var shutdownGrace: Duration = .seconds(30)
    /// NIO's decoder limits, as the edge promises them: the head (its URL, names and values, and trailers) at most
    /// `maximumHeadBytes`, at most `maximumHeaderCount` fields. A URL over `maximumRequestLineBytes` whose head
    /// still fits is refused by `EdgeRequests` once parsed.
    static var decoderLimits: HTTP1Channel.Configuration.DecoderConfiguration {
        .init(
            maxHeaderFieldSize: EdgeSettings.maximumHeadBytes, maxHeaderListSize: EdgeSettings.maximumHeadBytes,
            maxHeaderFieldCount: EdgeSettings.maximumHeaderCount
        )
    }

    public func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let operations = channel.pipeline.syncOperations
            let tap = EdgeTap(edge: edge)
            guard let tls else {
                try operations.addHandler(tap, position: .first)
                return Value(negotiated: try configureHTTP1(channel, tap: tap, logger: logger), channel: channel)
            }
            let decryption = NIOSSLServerHandler(context: tls.certificates.context)
            try operations.addHandler(decryption, position: .first)
            try operations.addHandler(tap, position: .after(decryption))
            // The TLS handshake says which protocol follows (ALPN): h2, or HTTP/1.1 when asked for or nothing is. The
            // handler holds back what is read until the pipeline is set up for it, so it is told that much, not the
            // outcome of HTTP/1.1's first request (which it would hold back).
            let (edge, grace, answer) = (edge, shutdownGrace, tls.answer)
            let alpn = NIOTypedApplicationProtocolNegotiationHandler<EventLoopFuture<Negotiated>> { result in
                channel.eventLoop.makeCompletedFuture {
                    if case .negotiated("h2") = result {
                        let tasks = try HTTP2Connection.configure(channel, edge: edge, answer: answer, grace: grace, logger: logger)
                        return channel.eventLoop.makeSucceededFuture(.http2(tasks))
                    }
                    return try configureHTTP1(channel, tap: tap, logger: logger)
                }
            }
            try operations.addHandler(alpn, position: .after(tap))
            return Value(negotiated: alpn.protocolNegotiationResult.flatMap { $0 }, channel: channel)
        }
    }

    /// HTTP/1.1 with NIO's upgrader (websockets), and the edge's rules right after NIO's decoder.
    private func configureHTTP1(_ channel: any Channel, tap: EdgeTap, logger: Logger) throws -> EventLoopFuture<Negotiated> {
        let operations = channel.pipeline.syncOperations
        let negotiated = try operations.configureUpgradableHTTPServerPipeline(configuration: pipelineConfiguration(logger: logger))
        let decoder = try operations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
        try operations.addHandler(
            EdgeRequests(edge: edge, tap: tap, upgrades: webSockets.map(KeptAliveUpgrade.init)), position: .after(decoder)
        )
        return negotiated
    }

    /// Hummingbird's HTTP/1.1 pipeline when the first request is not an upgrade; a websocket's when it is one we serve.
    private func pipelineConfiguration(logger: Logger) -> NIOUpgradableHTTPServerPipelineConfiguration<Negotiated> {
        let (http1, webSockets, secure) = (http1, webSockets, tls != nil)
        let upgradeRefused = NIOLockedValueBox(false)
        let upgrader = NIOTypedWebSocketServerUpgrader<Negotiated>(
            maxFrameSize: webSockets?.maximumFrameSize ?? 0,
            shouldUpgrade: { channel, head in
                let protocolName = webSockets?.subprotocol(head)
                if protocolName == nil { upgradeRefused.withLockedValue { $0 = true } }
                return channel.eventLoop.makeSucceededFuture(protocolName.map { HTTPHeaders([("Sec-WebSocket-Protocol", $0)]) })
            },
            upgradePipelineHandler: { channel, head in
                channel.eventLoop.makeCompletedFuture {
                    // The edge's HTTP rules have nothing left to watch (its tap stays: it counts the connection).
                    let operations = channel.pipeline.syncOperations
                    if let requests = try? operations.context(handlerType: EdgeRequests.self) {
                        operations.removeHandler(context: requests, promise: nil)
                    }
                    try webSockets?.serve(channel, head, nil)
                    return .webSocket
                }
            }
        )
        let upgrades = NIOTypedHTTPServerUpgradeConfiguration<Negotiated>(upgraders: webSockets == nil ? [] : [upgrader]) { channel in
            channel.eventLoop.makeCompletedFuture {
                let operations = channel.pipeline.syncOperations
                try operations.addHandler(HTTP1ToHTTPServerCodec(secure: secure))
                try operations.addHandlers(http1.additionalChannelHandlers())
                try operations.addHandler(HTTPConnectionStateHandler(idleTimeout: http1.idleTimeout.map { .init($0) }, logger: logger))
                let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                    wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)
                )
                return upgradeRefused.withLockedValue { $0 } ? .refusedUpgrade(http) : .http(http)
            }
        }
        var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Negotiated>(upgradeConfiguration: upgrades)
        // As Hummingbird sets them: its loop reads one request at a time, and answers errors itself.
        configuration.enablePipelining = false
        configuration.enableErrorHandling = false
        configuration.enableResponseHeaderValidation = false
        configuration.decoderConfiguration.maxHeaderFieldSize = http1.httpDecoder.maxHeaderFieldSize
        configuration.decoderConfiguration.maxHeaderListSize = http1.httpDecoder.maxHeaderListSize
        configuration.decoderConfiguration.maxHeaderFieldCount = http1.httpDecoder.maxHeaderFieldCount
        return configuration
    }

    public func handle(value: Value, logger: Logger) async {
        switch try? await value.negotiated.get() {
        case .http(let http):
            await HTTPConnection(responder: responder, upgrades: webSockets.map(KeptAliveUpgrade.init), metrics: edge.metrics)
                .serve(http, logger: logger)
        case .http2(let tasks):
            await HTTP2Connection.serve(value.channel, tasks: tasks, edge: edge, grace: shutdownGrace)
        case .refusedUpgrade(let http):
            if let webSockets { await Self.refuseUpgrade(http, with: webSockets.refusal) }
        case .webSocket, nil:
            // A socket is its event loop's now; a connection that closed before its first request is over.
            return
        }
    }

    /// An upgrade that offers no subprotocol served: a 400 that says which to offer, then the close.
    private static func refuseUpgrade(_ http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, with refusal: (head: HTTPResponse, body: ByteBuffer)) async {
        try? await http.executeThenClose { _, outbound in
            try await outbound.write(contentsOf: [.head(refusal.head), .body(refusal.body), .end(nil)])
        }
    }
}
