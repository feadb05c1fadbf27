import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing

@testable import Foyer

/// An upstream that answers the first request on each connection and, keeping the connection open as if for more,
/// closes it when the second arrives: what a server whose idle timeout fires just as a kept connection is reused
/// looks like from the client.
private final class ClosingOnSecondRequest: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let received: NIOLockedValueBox<[String]>
    private var requests = 0
    private var body = ""

    init(received: NIOLockedValueBox<[String]>) { self.received = received }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            body = ""
        case .body(let part):
            body += String(buffer: part)
        case .end:
            requests += 1
            received.withLockedValue { $0.append(body) }
            guard requests == 1 else {
                context.close(promise: nil)
                return
            }
            let answer = ByteBuffer(string: #"{"data":{"ok":true}}"#)
            let head = HTTPResponseHead(version: .http1_1, status: .ok, headers: [
                "Content-Type": "application/json", "Content-Length": "\(answer.readableBytes)",
            ])
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(answer))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// An upstream that reads requests and never answers.
private final class Silent: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}

/// A websocket upstream that accepts the upgrade and then says nothing, not even a pong: a dead peer behind a
/// connection that still looks open.
private final class AcceptsThenFallsSilent: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private var upgraded = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !upgraded else { return }
        let request = String(buffer: unwrapInboundIn(data))
        guard let line = request.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("sec-websocket-key:") }) else { return }
        let key = line.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)
        let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
        upgraded = true
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: """
            HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\
            Sec-WebSocket-Protocol: graphql-ws\r\n\r\n
            """)), promise: nil)
    }
}

@Suite struct UpstreamConnectionsTests {
    @Test func anUpstreamWebSocketThatFallsSilentIsClosedAfterTwoKeepAliveIntervals() async throws {
        let upstream = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(AcceptsThenFallsSilent()) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { upstream.close(promise: nil) }
        let start = ContinuousClock.now
        let messages = try await UpstreamWebSocket.connect(
            url: "ws://127.0.0.1:\(upstream.localAddress!.port!)/graphql", subprotocol: "graphql-ws", maximumMessageSize: 1 << 20,
            keepAliveInterval: .milliseconds(200)
        ) { connection in
            var count = 0
            do {
                for try await _ in connection.messages { count += 1 }
            } catch {
                // A closed channel may end the reading with an error instead of its end: either way it is over.
            }
            return count
        }
        let elapsed = ContinuousClock.now - start
        #expect(messages == 0)
        // Left open, it would never end; the upper bound only has to tell that apart, with the whole suite loading two
        // cores (3 s was missed under that load).
        #expect(elapsed >= .milliseconds(400) && elapsed < .seconds(15), "closed after two silent intervals, not left open")
    }

    /// An HTTP server on loopback whose connections each get a new `handler()`.
    private static func upstream(_ handler: @escaping @Sendable () -> any ChannelHandler) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(handler())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    private static func upstream(_ received: NIOLockedValueBox<[String]>) async throws -> any Channel {
        try await upstream { ClosingOnSecondRequest(received: received) }
    }

    /// All on one event loop, so the second request takes the connection the first one left.
    private static let loop = MultiThreadedEventLoopGroup.singleton.next()

    /// Its timeout only ends a hang: every suite at once on two cores once kept a loopback answer past 5 s.
    private static func post(_ connections: UpstreamConnections, _ body: String, idempotent: Bool) async throws -> UpstreamConnections.Answer {
        try await connections.post(
            headers: ["Content-Type": "application/json"], body: ByteBuffer(string: body), idempotent: idempotent,
            timeout: .seconds(30), maximumAnswerSize: 1 << 20, on: loop
        )
    }

    @Test func aQueryOnAConnectionClosedAsItWasReusedGoesAgainOnANewOne() async throws {
        let received = NIOLockedValueBox<[String]>([])
        let server = try await Self.upstream(received)
        let connections = try UpstreamConnections(url: "http://127.0.0.1:\(server.localAddress!.port!)/graphql")
        let answers = [try await Self.post(connections, "first", idempotent: true), try await Self.post(connections, "second", idempotent: true)]
        #expect(answers.map(\.head.status) == [.ok, .ok])
        #expect(received.withLockedValue { $0 } == ["first", "second", "second"])
        connections.close()
        try await server.close()
    }

    @Test func aMutationIsNotSentTwice() async throws {
        let received = NIOLockedValueBox<[String]>([])
        let server = try await Self.upstream(received)
        let connections = try UpstreamConnections(url: "http://127.0.0.1:\(server.localAddress!.port!)/graphql")
        _ = try await Self.post(connections, "first", idempotent: false)
        await #expect {
            _ = try await Self.post(connections, "mutation", idempotent: false)
        } throws: { error in
            if case UpstreamConnections.Failure.lost(partOfAnswer: false, _) = error { true } else { false }
        }
        #expect(received.withLockedValue { $0 } == ["first", "mutation"])
        connections.close()
        try await server.close()
    }

    // The time limit catches a timeout that never fires; an upper bound on the elapsed time would only measure how
    // busy the machine is (3.5 s for a 300 ms timeout once, in a CI running every suite at once).
    @Test(.timeLimit(.minutes(1))) func anUpstreamThatDoesNotAnswerTimesOut() async throws {
        let server = try await Self.upstream { Silent() }
        let connections = try UpstreamConnections(url: "http://127.0.0.1:\(server.localAddress!.port!)/graphql")
        let began = ContinuousClock.now
        await #expect {
            _ = try await connections.post(
                headers: [:], body: ByteBuffer(string: "{}"), idempotent: true, timeout: .milliseconds(300), maximumAnswerSize: 1 << 20, on: Self.loop
            )
        } throws: { error in
            if case UpstreamConnections.Failure.timedOut = error { true } else { false }
        }
        #expect(ContinuousClock.now - began >= .milliseconds(300), "not before its timeout")
        connections.close()
        try await server.close()
    }

    @Test func anAnswerLargerThanTheLimitIsRefused() async throws {
        let received = NIOLockedValueBox<[String]>([])
        let server = try await Self.upstream(received)
        let connections = try UpstreamConnections(url: "http://127.0.0.1:\(server.localAddress!.port!)/graphql")
        await #expect(throws: UpstreamConnections.Failure.self) {
            try await connections.post(headers: [:], body: ByteBuffer(string: "x"), idempotent: true, timeout: .seconds(5), maximumAnswerSize: 4)
        }
        connections.close()
        try await server.close()
    }
}
