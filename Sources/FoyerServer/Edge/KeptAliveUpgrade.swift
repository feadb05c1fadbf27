import Crypto
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1
import NIOWebSocket

/// A websocket asked for on a connection that already carried requests. NIO's upgrader only looks at a
/// connection's first request, but a balancer that keeps connections to Foyer alive (nginx with `keepalive`, as
/// scripts/nginx/foyer.conf has it) sends an upgrade on whichever connection it has free. Answered as a plain GET it
/// was a 401, and worse, NIO's HTTP parser stops at a request that says `Upgrade`: the next request on the connection
/// was never read, and the connection was reset under the balancer. Here the upgrade is done as NIO's upgrader does
/// it, from the edge's tap on: the `101`, the frame codec, the socket, and the connection's HTTP side let go.
struct KeptAliveUpgrade {
    let webSockets: WebSocketUpgrades

    /// Whether `request` is a websocket upgrade this connection can take now: a GET of an upgrade path offering
    /// version 13, a key and a subprotocol served. Anything else goes on as an ordinary request.
    func accepts(_ request: HTTPRequest) -> (head: HTTPRequestHead, key: String, subprotocol: String)? {
        guard request.headerFields[.upgrade] != nil, let head = try? HTTPRequestHead(request), let accepted = accepts(head) else { return nil }
        return (head, accepted.key, accepted.subprotocol)
    }

    /// The same, as the edge's rules see the head (`EdgeRequests` lets the `Upgrade` through only then).
    func accepts(_ head: HTTPRequestHead) -> (key: String, subprotocol: String)? {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? head.uri
        guard head.method == .GET, webSockets.paths.contains(path),
            head.headers["upgrade"].contains(where: { $0.lowercased() == "websocket" }),
            head.headers["sec-websocket-version"].first == "13", let key = head.headers["sec-websocket-key"].first,
            let subprotocol = webSockets.subprotocol(head)
        else { return nil }
        return (key, subprotocol)
    }

    /// Switches `channel` to the websocket, on its event loop. Its HTTP task must be done with it (taken over).
    func upgrade(_ channel: any Channel, head: HTTPRequestHead, key: String, subprotocol: String) {
        let webSockets = webSockets
        channel.eventLoop.execute {
            do {
                let operations = channel.pipeline.syncOperations
                // HTTP is over on this connection: its parser and the edge's HTTP rules go; the tap stays (it counts
                // the connection).
                if let decoder = try? operations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self) {
                    operations.removeHandler(context: decoder, promise: nil)
                }
                if let requests = try? operations.context(handlerType: EdgeRequests.self) {
                    operations.removeHandler(context: requests, promise: nil)
                }
                let tap = try operations.context(handlerType: EdgeTap.self)
                // What follows the tap is the websocket's; the HTTP handlers behind it hear nothing more.
                let encoder = WebSocketFrameEncoder()
                let decoder = ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: webSockets.maximumFrameSize))
                let errors = WebSocketProtocolErrorHandler()
                try operations.addHandler(encoder, position: .after(tap.handler))
                try operations.addHandler(decoder, position: .after(encoder))
                try operations.addHandler(errors, position: .after(decoder))
                tap.writeAndFlush(NIOAny(Self.switchingProtocols(key: key, subprotocol: subprotocol)), promise: nil)
                // The socket asks for its reads itself: the HTTP side behind it would hold them back.
                try webSockets.serve(channel, head, errors)
            } catch {
                channel.close(promise: nil)
            }
        }
    }

    /// The `101`, as bytes: written from the tap's place, past the HTTP encoder.
    static func switchingProtocols(key: String, subprotocol: String) -> ByteBuffer {
        let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
        return ByteBuffer(string: """
            HTTP/1.1 101 Switching Protocols\r
            Upgrade: websocket\r
            Connection: upgrade\r
            Sec-WebSocket-Accept: \(accept)\r
            Sec-WebSocket-Protocol: \(subprotocol)\r
            \r

            """)
    }
}
