import NIOCore
import NIOHTTPTypes

/// The first handler of every client connection: it counts the connection against the cap and tells the
/// connection's `EdgeRequests` when bytes arrive, before NIO's HTTP decoder reads them. It reads nothing in them:
/// where a request begins and ends is the decoder's to say.
final class EdgeTap: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let edge: Edge
    /// Told of every read until an upgrade happens (then bytes pass untouched).
    var requests: EdgeRequests?
    /// After a refusal nothing more is read: bytes that follow are never answered as another request.
    var closing = false
    private var counted = false
    /// The server began a graceful shutdown: a response that takes the connection over later ends at once.
    private(set) var quiescing = false

    init(edge: Edge) {
        self.edge = edge
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { opened(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        opened(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        requests = nil
        if counted {
            counted = false
            edge.connections.closed()
        }
        context.fireChannelInactive()
    }

    private func opened(_ context: ChannelHandlerContext) {
        guard !counted, !closing else { return }
        guard edge.connections.open() else {
            // Over the cap: closed at once, not left waiting for a slot; NIO's upgrader, told the input is over,
            // gives up on a first request quietly.
            closing = true
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
            context.close(promise: nil)
            return
        }
        counted = true
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent { quiescing = true }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        guard let requests else {
            context.fireChannelRead(data)
            return
        }
        requests.bytesArrive(unwrapInboundIn(data))
        context.fireChannelRead(data)
        requests.bytesRead()
    }
}

/// Closes the connection once a response that says `Connection: close` is written: an early answer such as a
/// `413` leaves the rest of the request's body unread, and Hummingbird would otherwise wait for it to drain.
extension ChannelPipeline.SynchronousOperations {
    /// Whether the server has begun a graceful shutdown, as this connection's edge heard it: a socket or stream that
    /// opens now ends at once.
    public var serverIsQuiescing: Bool { (try? handler(type: EdgeTap.self))?.quiescing == true }
}

final class CloseAfterResponse: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private var closing = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let response):
            closing = response.headerFields[.connection]?.lowercased() == "close"
            context.write(data, promise: promise)
        case .end where closing:
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            context.writeAndFlush(data, promise: written)
            written.futureResult.whenComplete { _ in context.close(promise: nil) }
        case .body, .end:
            context.write(data, promise: promise)
        }
    }
}
