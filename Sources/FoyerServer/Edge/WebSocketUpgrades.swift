import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// The websockets a server upgrades to, as the feature that serves them says: where, in which subprotocols, with
/// what frame size, and who takes a connection once it is upgraded. Anywhere else an `Upgrade` is ignored.
public struct WebSocketUpgrades: Sendable {
    /// Paths whose `Upgrade` the edge lets through.
    let paths: Set<String>
    let maximumFrameSize: Int
    /// The subprotocol a handshake is answered with; nil when it offers none served (then it is refused).
    let subprotocol: @Sendable (HTTPRequestHead) -> String?
    /// Takes the upgraded channel over, on its event loop, once the `101` is written. After a late upgrade (on a
    /// kept-alive connection) the socket's handler goes right after `previous`, the frame codec's last handler.
    let serve: @Sendable (_ channel: any Channel, _ upgradeRequest: HTTPRequestHead, _ previous: (any ChannelHandler)?) throws -> Void
    /// The `400` for an upgrade that offers no subprotocol served (the connection closes after it).
    let refusal: (head: HTTPResponse, body: ByteBuffer)

    public init(
        paths: Set<String>, maximumFrameSize: Int, subprotocol: @escaping @Sendable (HTTPRequestHead) -> String?,
        serve: @escaping @Sendable (_ channel: any Channel, _ upgradeRequest: HTTPRequestHead, _ previous: (any ChannelHandler)?) throws -> Void,
        refusal: (head: HTTPResponse, body: ByteBuffer)
    ) {
        (self.paths, self.maximumFrameSize, self.subprotocol, self.serve, self.refusal) = (paths, maximumFrameSize, subprotocol, serve, refusal)
    }
}
