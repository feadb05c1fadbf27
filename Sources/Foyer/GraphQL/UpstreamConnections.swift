import Foundation
import FoyerServer
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// Keep-alive HTTP/1.1 connections to the GraphQL upstream, kept per event loop: a request goes out on a
/// connection of the event loop it is served on, so proxying it involves no other thread. Request head and body
/// leave in one write. (AsyncHTTPClient, used before, hopped threads on every call and wrote the body after the
/// head, and cost four times Foyer's own plain route; see scripts/bench.)
///
/// A connection the upstream closed while it sat idle is noticed when it is taken, or when the request on it fails
/// before any of the answer came back: then an idempotent request (a GraphQL query) is sent once more, on a new
/// connection. A mutation is not: the upstream may have run it before the connection broke (nginx does not resend
/// a POST either), so the caller hears the upstream could not be reached.
final class UpstreamConnections: Sendable {
    static let connectTimeout: TimeAmount = .seconds(5)
    static let maximumIdlePerLoop = 64
    static let maximumIdleTime: TimeAmount = .seconds(30)

    struct Answer: Sendable {
        let head: HTTPResponseHead
        let body: ByteBuffer
    }

    enum Failure: Error, CustomStringConvertible {
        /// The connection ended or broke before the whole answer came; `partOfAnswer` says whether any of it did.
        case lost(partOfAnswer: Bool, reason: String)
        case answerTooLarge(limit: Int)
        case timedOut

        var description: String {
            switch self {
            case .lost(_, let reason): "the connection was lost (\(reason))"
            case .answerTooLarge(let limit): "the answer is larger than \(limit) bytes"
            case .timedOut: "no answer in time"
            }
        }
    }

    private struct Idle {
        let channel: any Channel
        let since: NIODeadline
    }

    let host: String
    let port: Int
    /// `Host` header and request target, from the URL.
    let authority: String
    let target: String
    private let tls: NIOSSLContext?
    private let idle = NIOLockedValueBox<[ObjectIdentifier: [Idle]]>([:])

    init(url: String) throws {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), let host = components.host,
            scheme == "http" || scheme == "https"
        else { throw StartupError("the GraphQL URL \(url) is not an http:// or https:// URL") }
        let secure = scheme == "https"
        self.host = host
        port = components.port ?? (secure ? 443 : 80)
        authority = components.port.map { "\(host):\($0)" } ?? host
        target = (components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath)
            + (components.percentEncodedQuery.map { "?\($0)" } ?? "")
        tls = secure ? try NIOSSLContext(configuration: .makeClientConfiguration()) : nil
    }

    /// POSTs `body` and waits for the whole answer (at most `maximumAnswerSize` bytes) or `timeout`, on a
    /// connection of `eventLoop`: by default the one running the caller (Foyer runs its tasks on event loops).
    func post(
        headers: HTTPHeaders, body: ByteBuffer, idempotent: Bool, timeout: TimeAmount, maximumAnswerSize: Int,
        on eventLoop: (any EventLoop)? = nil
    ) async throws -> Answer {
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: target, headers: headers)
        head.headers.replaceOrAdd(name: "Host", value: authority)
        head.headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
        let eventLoop = eventLoop ?? MultiThreadedEventLoopGroup.currentEventLoop ?? MultiThreadedEventLoopGroup.singleton.any()
        let deadline = NIODeadline.now() + timeout
        if let reused = takeIdle(on: eventLoop) {
            do {
                return try await exchange(head, body, on: reused, deadline: deadline, limit: maximumAnswerSize)
            } catch Failure.lost(partOfAnswer: false, _) where idempotent {
                // Most likely closed by the upstream as we reused it; a query may go again either way.
            }
        }
        let channel = try await connect(on: eventLoop)
        return try await exchange(head, body, on: channel, deadline: deadline, limit: maximumAnswerSize)
    }

    /// Closes the idle connections; ones in use close when their answer is in.
    func close() {
        let all = idle.withLockedValue { idle in
            defer { idle = [:] }
            return idle.values.flatMap { $0 }
        }
        for entry in all { entry.channel.close(promise: nil) }
    }

    private func exchange(
        _ head: HTTPRequestHead, _ body: ByteBuffer, on channel: any Channel, deadline: NIODeadline, limit: Int
    ) async throws -> Answer {
        let promise = channel.eventLoop.makePromise(of: Answer.self)
        let send: @Sendable () -> Void = {
            do {
                let handler = try channel.pipeline.syncOperations.handler(type: AnswerHandler.self)
                handler.expect(promise, limit: limit, deadline: deadline)
                channel.write(HTTPClientRequestPart.head(head), promise: nil)
                if body.readableBytes > 0 { channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil) }
                channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
            } catch {
                promise.fail(error)
            }
        }
        if channel.eventLoop.inEventLoop { send() } else { channel.eventLoop.execute(send) }
        let answer: Answer
        do {
            answer = try await promise.futureResult.get()
        } catch {
            channel.close(promise: nil)
            throw error
        }
        if answer.head.isKeepAlive, channel.isActive {
            putIdle(channel)
        } else {
            channel.close(promise: nil)
        }
        return answer
    }

    private func connect(on eventLoop: any EventLoop) async throws -> any Channel {
        let (tls, host) = (tls, host)
        return try await ClientBootstrap(group: eventLoop)
            .connectTimeout(Self.connectTimeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: host)) }
                    // Every field sent is one Foyer read from a request NIO's parser accepted or wrote itself:
                    // checking them again for line breaks was 3 % of a proxied request.
                    try channel.pipeline.syncOperations.addHTTPClientHandlers(enableOutboundHeaderValidation: false)
                    try channel.pipeline.syncOperations.addHandler(AnswerHandler())
                }
            }
            .connect(host: host, port: port)
            .get()
    }

    private func takeIdle(on eventLoop: any EventLoop) -> (any Channel)? {
        let now = NIODeadline.now()
        var stale: [any Channel] = []
        defer { for channel in stale { channel.close(promise: nil) } }
        return idle.withLockedValue { idle in
            while let entry = idle[ObjectIdentifier(eventLoop)]?.popLast() {
                if entry.channel.isActive, now - entry.since < Self.maximumIdleTime { return entry.channel }
                stale.append(entry.channel)
            }
            return nil
        }
    }

    private func putIdle(_ channel: any Channel) {
        let kept = idle.withLockedValue { idle in
            let key = ObjectIdentifier(channel.eventLoop)
            guard idle[key, default: []].count < Self.maximumIdlePerLoop else { return false }
            idle[key, default: []].append(Idle(channel: channel, since: .now()))
            return true
        }
        if !kept { channel.close(promise: nil) }
    }
}

/// Collects one answer at a time on its connection and completes the waiting request with it.
private final class AnswerHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    private var promise: EventLoopPromise<UpstreamConnections.Answer>?
    private var head: HTTPResponseHead?
    private var body = ByteBuffer()
    private var limit = 0
    private var context: ChannelHandlerContext?
    /// When the answer now awaited is too late, and the one timer of this connection. The timer is not set per
    /// request (that cost 3 % of a proxied request): when it fires before a later request's deadline it is set
    /// again for that one, so back-to-back requests share it.
    private var deadline: NIODeadline?
    private var timer: Scheduled<Void>?

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        self.context = nil
    }

    func expect(_ promise: EventLoopPromise<UpstreamConnections.Answer>, limit: Int, deadline: NIODeadline) {
        self.promise = promise
        self.limit = limit
        self.deadline = deadline
        head = nil
        body = ByteBuffer()
        if timer == nil { arm(at: deadline) }
    }

    private func arm(at when: NIODeadline) {
        guard let context else { return }
        // Handlers run on their channel's loop, and so does this timer: no other thread touches `self`.
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: when) {
            self.timer = nil
            guard self.promise != nil, let deadline = self.deadline else { return }
            if NIODeadline.now() >= deadline { self.timeOut() } else { self.arm(at: deadline) }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(var part):
            guard body.readableBytes + part.readableBytes <= limit else {
                fail(.answerTooLarge(limit: limit))
                context.close(promise: nil)
                return
            }
            // Most answers come in one part: keep it rather than copy it.
            if body.readableBytes == 0 { body = part } else { body.writeBuffer(&part) }
        case .end:
            guard let head, let promise else { return }
            self.promise = nil
            promise.succeed(.init(head: head, body: body))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(.lost(partOfAnswer: head != nil, reason: "closed by the upstream"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(.lost(partOfAnswer: head != nil, reason: String(describing: error)))
        context.close(promise: nil)
    }

    func timeOut() {
        fail(.timedOut)
        context?.close(promise: nil)
    }

    private func fail(_ failure: UpstreamConnections.Failure) {
        guard let promise else { return }
        self.promise = nil
        promise.fail(failure)
    }
}
