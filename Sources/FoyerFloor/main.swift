// The floor under Foyer's figures, for scripts/bench: the least a server on Foyer's stack costs to answer `/up`,
// and to proxy a POST to the GraphQL upstream, with none of Foyer's own work (no session, log line, metrics, kept
// answers, middleware). Set beside Foyer's rows, it tells what a target asks of Foyer from what it asks of the
// framework under it.
//
//   foyer-floor nio-up PORT                    /up answered by a SwiftNIO channel handler on the event loop
//   foyer-floor hummingbird-up PORT [UPSTREAM_PORT]
//                                              /up as Hummingbird's smallest application answers it; beside it, in
//                                              the same application, `POST /echo` (the JSON body collected and sent
//                                              back: what a POST costs over a GET), `GET /bytes/N` (N bytes of
//                                              HTML in one buffer: what a page's size costs over `OK`) and, given
//                                              an upstream, `POST /graphql` (the body sent on and the answer awaited
//                                              by the route: what an async route's upstream call costs)
//   foyer-floor nio-proxy PORT UPSTREAM_PORT   a POST sent on to 127.0.0.1:UPSTREAM_PORT and its answer back, on
//                                              one kept-alive upstream connection per client connection
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// `OK`, as Foyer's `/up` says it.
final class PlainUp: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = unwrapInboundIn(data) else { return }
        let headers = HTTPHeaders([("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "2")])
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "OK")))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

/// Reads the upstream's answers whole and gives each to whoever waits for it.
final class UpstreamAnswers: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    private var head: HTTPResponseHead?
    private var body = ByteBuffer()
    var waiting: ((HTTPResponseHead, ByteBuffer) -> Void)?
    /// The route awaiting the answer (`UpstreamPool`), told too when the connection goes first.
    var promise: EventLoopPromise<(HTTPResponseHead, ByteBuffer)>?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let received):
            head = received
            body.clear()
        case .body(var bytes): body.writeBuffer(&bytes)
        case .end:
            guard let head else { return }
            if let promise {
                self.promise = nil
                promise.succeed((head, body))
            }
            guard let answer = waiting else { return }
            waiting = nil
            answer(head, body)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise?.fail(ChannelError.ioOnClosedChannel)
        promise = nil
        context.fireChannelInactive()
    }
}

/// Kept-alive connections to the upstream, the idle ones kept per event loop: the least a Hummingbird route needs to
/// send a POST on and await its answer, as Foyer's proxy does, with none of Foyer's work around it.
final class UpstreamPool: Sendable {
    let port: Int
    private let idle = NIOLockedValueBox([ObjectIdentifier: [any Channel]]())

    init(port: Int) {
        self.port = port
    }

    func post(_ body: ByteBuffer, on eventLoop: any EventLoop) async throws -> (HTTPResponseHead, ByteBuffer) {
        let reused = idle.withLockedValue { $0[ObjectIdentifier(eventLoop)]?.popLast() }
        let channel = if let reused, reused.isActive { reused } else { try await connect(on: eventLoop) }
        let request = HTTPRequestHead(
            version: .http1_1, method: .POST, uri: "/graphql",
            headers: HTTPHeaders([("Host", "127.0.0.1:\(port)"), ("Content-Type", "application/json"), ("Content-Length", String(body.readableBytes))])
        )
        let answer = try await channel.eventLoop.flatSubmit { () -> EventLoopFuture<(HTTPResponseHead, ByteBuffer)> in
            // Gone with its handlers when the connection closed meanwhile.
            guard let answers = try? channel.pipeline.syncOperations.handler(type: UpstreamAnswers.self) else {
                return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
            }
            let promise = channel.eventLoop.makePromise(of: (HTTPResponseHead, ByteBuffer).self)
            answers.promise = promise
            PlainProxy.send(request, body, on: channel)
            return promise.futureResult
        }.get()
        if answer.0.isKeepAlive {
            idle.withLockedValue { $0[ObjectIdentifier(channel.eventLoop), default: []].append(channel) }
        } else {
            channel.close(promise: nil)
        }
        return answer
    }

    private func connect(on eventLoop: any EventLoop) async throws -> any Channel {
        try await ClientBootstrap(group: eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(UpstreamAnswers())
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
    }
}

/// One client connection's requests, each sent on to the upstream and answered with what it answered.
final class PlainProxy: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let upstreamPort: Int
    private var upstream: (any Channel)?
    private let answers = UpstreamAnswers()
    private var body = ByteBuffer()

    init(upstreamPort: Int) {
        self.upstreamPort = upstreamPort
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: body.clear()
        case .body(var bytes): body.writeBuffer(&bytes)
        case .end: forward(body, context: context)
        }
    }

    private func forward(_ body: ByteBuffer, context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        answers.waiting = { head, answer in
            let (proxy, context) = bound.value
            // The upstream closes a kept-alive connection after so many requests (nginx: 1,000) and says so.
            if !head.isKeepAlive {
                proxy.upstream?.close(promise: nil)
                proxy.upstream = nil
            }
            proxy.answer(head.status, contentType: head.headers.first(name: "Content-Type") ?? "application/json", answer, context: context)
        }
        let request = HTTPRequestHead(
            version: .http1_1, method: .POST, uri: "/graphql",
            headers: HTTPHeaders([
                ("Host", "127.0.0.1:\(upstreamPort)"), ("Content-Type", "application/json"), ("Content-Length", String(body.readableBytes)),
            ])
        )
        if let upstream {
            Self.send(request, body, on: upstream)
            return
        }
        let answers = NIOLoopBound(answers, eventLoop: context.eventLoop)
        ClientBootstrap(group: context.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(answers.value)
                }
            }
            .connect(host: "127.0.0.1", port: upstreamPort)
            .whenComplete { result in
                let (proxy, context) = bound.value
                switch result {
                case .success(let channel):
                    proxy.upstream = channel
                    Self.send(request, body, on: channel)
                    channel.closeFuture.whenComplete { _ in
                        let (proxy, context) = bound.value
                        guard proxy.upstream === channel else { return }
                        proxy.upstream = nil
                        if proxy.answers.waiting != nil {
                            proxy.answers.waiting = nil
                            proxy.answer(.badGateway, contentType: "text/plain", ByteBuffer(string: "the upstream closed the connection"), context: context)
                        }
                    }
                case .failure(let error):
                    proxy.answers.waiting = nil
                    proxy.answer(.badGateway, contentType: "text/plain", ByteBuffer(string: "upstream: \(error)"), context: context)
                }
            }
    }

    static func send(_ request: HTTPRequestHead, _ body: ByteBuffer, on channel: any Channel) {
        channel.write(HTTPClientRequestPart.head(request), promise: nil)
        channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil)
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
    }

    private func answer(_ status: HTTPResponseStatus, contentType: String, _ body: ByteBuffer, context: ChannelHandlerContext) {
        let headers = HTTPHeaders([("Content-Type", contentType), ("Content-Length", String(body.readableBytes))])
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        upstream?.close(promise: nil)
        context.fireChannelInactive()
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3, let port = Int(arguments[2]) else {
    fatalError("usage: foyer-floor nio-up PORT, foyer-floor hummingbird-up PORT [UPSTREAM_PORT], or foyer-floor nio-proxy PORT UPSTREAM_PORT")
}
// As many event loops as Foyer runs (one per core).
let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
switch arguments[1] {
case "nio-up", "nio-proxy":
    let proxying = arguments[1] == "nio-proxy"
    guard !proxying || arguments.count == 4, let upstreamPort = proxying ? Int(arguments[3]) : 0 else {
        fatalError("usage: foyer-floor nio-proxy PORT UPSTREAM_PORT")
    }
    let server = try await ServerBootstrap(group: group)
        .serverChannelOption(.backlog, value: 256)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                try channel.pipeline.syncOperations.addHandler(proxying ? PlainProxy(upstreamPort: upstreamPort) as any ChannelHandler : PlainUp())
            }
        }
        .bind(host: "127.0.0.1", port: port).get()
    try await server.closeFuture.get()
case "hummingbird-up":
    let router = Router()
    router.get("/up") { _, _ in "OK" }
    router.post("/echo") { request, _ in
        let body = try await request.body.collect(upTo: 1 << 20)
        return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: body))
    }
    router.get("/bytes/{count}") { _, context in
        guard let count = context.parameters.get("count", as: Int.self), (0...(1 << 20)).contains(count) else {
            throw HTTPError(.badRequest, message: "a count of bytes from 0 to 1048576")
        }
        let page = ByteBuffer(repeating: UInt8(ascii: "a"), count: count)
        return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: ResponseBody(byteBuffer: page))
    }
    if arguments.count == 4, let upstreamPort = Int(arguments[3]) {
        let upstream = UpstreamPool(port: upstreamPort)
        router.post("/graphql") { request, _ in
            let body = try await request.body.collect(upTo: 1 << 20)
            // A connection of the loop the route runs on when it runs on one; Hummingbird's routes run on Swift's
            // own pool by default, and then any loop's.
            let (head, answer) = try await upstream.post(body, on: MultiThreadedEventLoopGroup.currentEventLoop ?? group.any())
            let contentType = head.headers.first(name: "Content-Type") ?? "application/json"
            return Response(
                status: .init(code: Int(head.status.code)), headers: [.contentType: contentType], body: ResponseBody(byteBuffer: answer)
            )
        }
    }
    let application = Application(
        router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), eventLoopGroupProvider: .shared(group)
    )
    try await application.runService()
default:
    fatalError("foyer-floor: the modes are nio-up, hummingbird-up and nio-proxy, not \(arguments[1])")
}
