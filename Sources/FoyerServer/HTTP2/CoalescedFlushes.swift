import NIOCore

/// Between TLS and HTTP/2: the flushes a connection's streams ask for in one turn of the event loop become one, at
/// the end of that turn. Each stream is answered by a task of its own, and each task flushes its answer: without
/// this, eight streams answered together cost eight TLS records and eight `write(2)`s instead of one.
final class CoalescedFlushes: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData

    private var flushPending = false

    func flush(context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        context.eventLoop.assumeIsolated().execute {
            self.flushNow(context)
        }
    }

    /// What is written before a close goes out before it.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        flushNow(context)
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        flushNow(context)
    }

    private func flushNow(_ context: ChannelHandlerContext) {
        guard flushPending else { return }
        flushPending = false
        context.flush()
    }
}
