import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// A websocket to an upstream GraphQL server, opened as the server-to-server client Foyer is: no `Origin` header.
/// (A browser sends `Origin` so the server can refuse other sites' pages; HummingbirdWSClient always sends one made
/// from the URL without its port, which a server that checks it, as strawberry-graphql does by default, refuses.)
/// The upgrade request carries the X-Request-Id and traceparent of the request it serves (RequestTrace).
/// Text messages only, as graphql-ws speaks; pings are answered, fragmented messages joined, `maximumMessageSize`
/// enforced.
enum UpstreamWebSocket {
    static let connectTimeout: TimeAmount = .seconds(10)
    /// Foyer pings the upstream this often; a socket that brings nothing at all (not even a pong) for twice this
    /// is dead, however open its TCP connection looks, and is closed so that its user connects again.
    static let keepAliveInterval: Duration = .seconds(15)

    struct UpgradeDeclined: Error, CustomStringConvertible {
        let description = "the upstream declined the websocket upgrade"
    }

    struct MessageTooLarge: Error, CustomStringConvertible {
        let limit: Int
        var description: String { "the upstream sent a websocket message larger than \(limit) bytes" }
    }

    private enum Upgrade: Sendable {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        case declined
    }

    /// Connects, then runs `body` with the connection until it returns or throws; the socket is closed after.
    static func connect<Result: Sendable>(
        url: String, subprotocol: String, maximumMessageSize: Int, keepAliveInterval: Duration = keepAliveInterval,
        _ body: (Connection) async throws -> Result
    ) async throws -> Result {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), let host = components.host,
            ["ws", "wss", "http", "https"].contains(scheme)
        else { throw GraphQLUpstreamError.unreachable("\(url) is not a ws:// or wss:// URL") }
        let secure = scheme == "wss" || scheme == "https"
        let port = components.port ?? (secure ? 443 : 80)
        let path = (components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath)
            + (components.percentEncodedQuery.map { "?\($0)" } ?? "")
        let hostHeader = components.port.map { "\(host):\($0)" } ?? host
        let tls = secure ? try NIOSSLContext(configuration: .makeClientConfiguration()) : nil
        let trace = RequestTrace.current?.headerPairs ?? []

        let upgrade = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(connectTimeout)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: host))
                    }
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(maxFrameSize: maximumMessageSize) { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            .websocket(try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel))
                        }
                    }
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: hostHeader)
                    headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol)
                    headers.add(name: "Content-Length", value: "0")
                    headers.add(contentsOf: trace)
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                        upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers),
                        upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in channel.eventLoop.makeCompletedFuture { .declined } }
                    )
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: .init(upgradeConfiguration: configuration)
                    )
                }
            }
        guard case .websocket(let channel) = try await upgrade.get() else { throw UpgradeDeclined() }
        return try await channel.executeThenClose { inbound, outbound in
            let heard = LastHeard()
            let watchdog = Task { await watch(channel.channel, outbound: outbound, heard: heard, interval: keepAliveInterval) }
            defer { watchdog.cancel() }
            return try await body(Connection(inbound: inbound, outbound: outbound, maximumMessageSize: maximumMessageSize, heard: heard))
        }
    }

    /// When the upstream last sent anything.
    final class LastHeard: Sendable {
        private let at = NIOLockedValueBox(ContinuousClock.now)
        func now() { at.withLockedValue { $0 = .now } }
        var silence: Duration { .now - at.withLockedValue { $0 } }
    }

    /// Pings every `interval`, and closes the socket once nothing has come back for twice that.
    private static func watch(
        _ channel: any Channel, outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>, heard: LastHeard, interval: Duration
    ) async {
        while (try? await Task.sleep(for: interval)) != nil {
            if heard.silence >= interval * 2 {
                try? await channel.close()
                return
            }
            try? await outbound.write(WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: ByteBuffer()))
        }
    }

    /// One open websocket: send text, and read text messages until the upstream closes.
    struct Connection {
        fileprivate let inbound: NIOAsyncChannelInboundStream<WebSocketFrame>
        fileprivate let outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>
        fileprivate let maximumMessageSize: Int
        fileprivate let heard: LastHeard

        func send(_ text: String) async throws {
            try await outbound.write(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: text)))
        }

        var messages: Messages { Messages(connection: self) }
    }

    /// Text messages as they arrive; ends when the upstream closes the socket.
    struct Messages: AsyncSequence {
        typealias Element = String
        fileprivate let connection: Connection

        func makeAsyncIterator() -> Iterator {
            Iterator(frames: connection.inbound.makeAsyncIterator(), connection: connection)
        }

        struct Iterator: AsyncIteratorProtocol {
            fileprivate var frames: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator
            fileprivate let connection: Connection

            mutating func next() async throws -> String? {
                var message = ByteBuffer()
                while let frame = try await frames.next() {
                    connection.heard.now()
                    switch frame.opcode {
                    case .text, .binary, .continuation:
                        var data = frame.unmaskedData
                        guard message.readableBytes + data.readableBytes <= connection.maximumMessageSize else {
                            throw MessageTooLarge(limit: connection.maximumMessageSize)
                        }
                        message.writeBuffer(&data)
                        if frame.fin { return String(buffer: message) }
                    case .ping:
                        try await connection.outbound.write(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData))
                    case .connectionClose:
                        // Echo the close (RFC 6455 §5.5.1), then the socket is done.
                        try? await connection.outbound.write(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: frame.unmaskedData))
                        return nil
                    default:
                        continue  // pong and reserved opcodes
                    }
                }
                return nil
            }
        }
    }
}
