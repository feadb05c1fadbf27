import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOSSL
import Synchronization

/// One HTTP/1 connection's requests, read and answered in turn by the connection's task: Hummingbird's own loop
/// (`HTTPChannelHandler.handleHTTP`), with one difference. A response may take the connection over
/// (`ConnectionHandover`): a live stream whose events its channel's fan-out writes from the event loop. Then this
/// task ends at once and leaves the connection open, so an idle stream holds no task, no stack and no HTTP decoder;
/// Hummingbird's loop would wait on it until the client left.
struct HTTPConnection {
    let responder: HTTPChannelHandler.Responder
    /// A websocket asked for after the connection's first request (a balancer's kept-alive connection); nil where
    /// no websocket is served.
    let upgrades: KeptAliveUpgrade?
    let metrics: ServerMetrics

    func serve(_ http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, logger: Logger) async {
        let channel = http.channel
        let (inbound, outbound) = http.parts
        do {
            let handover = ConnectionHandover(channel: channel)
            try await withTaskExecutorPreference(EventLoopTaskExecutor.on(channel.eventLoop)) {
                try await withTaskCancellationHandler {
                    try await requests(from: inbound, answeredOn: outbound, channel: channel, handover: handover, logger: logger)
                } onCancel: {
                    channel.close(mode: .input, promise: nil)
                }
            }
            if handover.isTaken { return }
            // As Hummingbird's loop: the output ends, and the connection closes once the client closes its side.
            outbound.finish()
            try await channel.closeFuture.get()
        } catch {
            logger.trace("Failed to read/write to Channel. Error: \(error)")
            outbound.finish()
            channel.close(promise: nil)
        }
    }

    /// A part where another was due: a body or end where a head should start a request, a head inside a body.
    struct UnexpectedPart: Error {
        let part: HTTPRequestPart
    }

    /// Answers requests until the client closes, a request asks to close, or a response takes the connection over.
    private func requests(
        from inbound: NIOAsyncChannelInboundStream<HTTPRequestPart>, answeredOn outbound: NIOAsyncChannelOutboundWriter<HTTPResponsePart>,
        channel: any Channel, handover: ConnectionHandover, logger: Logger
    ) async throws {
        var parts = inbound.makeAsyncIterator()
        do {
            guard let first = try await parts.next() else { return }
            guard case .head(var head) = first else { throw UnexpectedPart(part: first) }
            while true {
                metrics.requestRead(over: .http1)
                if let upgrades, let upgrade = upgrades.accepts(head) {
                    handover.takeForUpgrade()
                    upgrades.upgrade(channel, head: upgrade.head, key: upgrade.key, subprotocol: upgrade.subprotocol)
                    return
                }
                let request = Request(head: head, body: RequestBody(asyncSequence: RequestBodyParts(parts)))
                try await ConnectionHandover.$current.withValue(handover) {
                    try await responder(request, ResponseWriter(outbound: outbound), channel)
                }
                if handover.isTaken || request.headers.value(.connection) == "close" { return }
                // What the route left of the body is read and dropped; then the next request's head.
                var part = try await parts.next()
                while case .body = part { part = try await parts.next() }
                if case .end = part { part = try await parts.next() }
                guard let part else { return }
                guard case .head(let next) = part else { throw UnexpectedPart(part: part) }
                head = next
            }
        } catch is HTTPParserError {
            logger.debug("HTTP parse error, closing connection")
            try await outbound.write(.head(.init(status: .badRequest, headerFields: [.connection: "close", .contentLength: "0"])))
            try await outbound.write(.end(nil))
        }
    }
}

/// A request's body: the connection's parts up to the request's end. The loop reads on from the same iterator
/// (iterators of one inbound stream share its position), as Hummingbird's own body type, which it keeps to itself.
struct RequestBodyParts: AsyncSequence, @unchecked Sendable {
    typealias Element = ByteBuffer
    /// Not Sendable, but only ever read by one task at a time: the route's, then the loop's after it.
    let parts: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator

    init(_ parts: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator) {
        self.parts = parts
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        var parts: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator
        var done = false

        mutating func next() async throws -> ByteBuffer? {
            guard !done, let part = try await parts.next() else { return nil }
            switch part {
            case .body(let buffer): return buffer
            case .end:
                done = true
                return nil
            case .head: throw HTTPConnection.UnexpectedPart(part: part)
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(parts: parts) }
}

/// Lets the response being written take its connection over: from then on something on the event loop (a live
/// stream's fan-out) writes it, and the connection's task ends without closing it. Set by `HTTPConnection` for
/// the requests it reads; nil elsewhere (the router test client), where a response keeps its task.
public final class ConnectionHandover: Sendable {
    @TaskLocal public static var current: ConnectionHandover?

    private let channel: any Channel
    private let taken = Atomic<Bool>(false)

    init(channel: any Channel) {
        self.channel = channel
    }

    var isTaken: Bool { taken.load(ordering: .acquiring) }

    /// The connection becomes a websocket (`KeptAliveUpgrade`): its task ends without closing it.
    func takeForUpgrade() { taken.store(true, ordering: .releasing) }

    /// Takes the connection over once its response head and opening are written (events written after this go out
    /// after them: the event loop runs what is given to it in order). `onQuiesce` is called on the event loop when
    /// the server begins a graceful shutdown (or has already): it should end the response. What it gives writes the
    /// response's body from then on.
    public func take(onQuiesce: @escaping @Sendable () -> Void) -> HandedOverConnection {
        taken.store(true, ordering: .releasing)
        let (channel, connection) = (channel, HandedOverConnection(onQuiesce: onQuiesce))
        channel.eventLoop.execute {
            let operations = channel.pipeline.syncOperations
            // First, or right after TLS: what it writes must still be encrypted.
            let position: ChannelPipeline.SynchronousOperations.Position =
                if let tls = try? operations.handler(type: NIOSSLServerHandler.self) { .after(tls) } else { .first }
            guard channel.isActive, (try? operations.addHandler(connection, position: position)) != nil else { return }
            // Nothing more is parsed as HTTP: the decoder and its buffers go.
            if let decoder = try? operations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self) {
                operations.removeHandler(context: decoder, promise: nil)
            }
            if operations.serverIsQuiescing { onQuiesce() }
        }
        return connection
    }
}

/// First in a connection that was taken over. The client sends nothing more on it (an EventSource never does):
/// whatever arrives closes it. It reads on by itself, since the HTTP side that asked for reads has ended, so a client
/// that leaves is seen at once. (The ended task's writer is dropped unfinished: NIO's async channel does not finish
/// it on deinit, so it half-closes nothing.) A graceful shutdown ends the response. Body chunks are framed and
/// written here, past the HTTP handlers: a change reaches ten thousand connections without passing each one's
/// pipeline.
public final class HandedOverConnection: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    public typealias InboundIn = ByteBuffer
    public typealias OutboundIn = NIOAny
    public typealias OutboundOut = ByteBuffer

    private let onQuiesce: @Sendable () -> Void
    /// Set once the handler is in the pipeline; only used on the connection's event loop.
    private var context: ChannelHandlerContext?

    init(onQuiesce: @escaping @Sendable () -> Void) {
        self.onQuiesce = onQuiesce
    }

    /// Writes `bytes` as one chunk of the response's body (HTTP/1.1 chunked coding), without flushing.
    public func writeChunk(_ bytes: ByteBuffer) {
        guard bytes.readableBytes > 0 else { return }
        write(Self.chunk(bytes))
    }

    /// Writes bytes already framed as a chunk (`chunk`), without flushing: a fan-out frames an event once for all.
    /// On the connection's event loop (a fan-out checks that once per delivery, not per connection).
    public func write(_ chunk: ByteBuffer) {
        guard let context else { return }
        context.write(wrapOutboundOut(chunk), promise: nil)
    }

    /// Flushes from here, not through the pipeline behind.
    public func flush() {
        context?.flush()
    }

    /// `bytes` as one chunk of an HTTP/1.1 chunked body: its size in hex, the bytes, a line end.
    public static func chunk(_ bytes: ByteBuffer) -> ByteBuffer {
        let size = String(bytes.readableBytes, radix: 16)
        var chunk = ByteBufferAllocator().buffer(capacity: size.utf8.count + bytes.readableBytes + 4)
        chunk.writeString(size)
        chunk.writeStaticString("\r\n")
        chunk.writeImmutableBuffer(bytes)
        chunk.writeStaticString("\r\n")
        return chunk
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        context.read()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.close(promise: nil)
    }

    public func channelReadComplete(context: ChannelHandlerContext) {
        context.read()
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent { onQuiesce() }
        // The client closed its side (a browser's EventSource.close() sends a FIN; the server allows half-closed
        // connections): it is gone, and its stream with it, not only when the next heartbeat finds no one.
        if case .inputClosed? = event as? ChannelEvent {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// NIOAsyncChannel's halves outside `executeThenClose`, which would close the connection when its task ends: a
/// connection taken over outlives it. Read through a protocol, as NIO marks the properties deprecated for
/// everyone else's sake.
private protocol AsyncChannelHalves {
    associatedtype Inbound: Sendable
    associatedtype Outbound: Sendable
    var inbound: NIOAsyncChannelInboundStream<Inbound> { get }
    var outbound: NIOAsyncChannelOutboundWriter<Outbound> { get }
}

extension NIOAsyncChannel: AsyncChannelHalves {}

extension AsyncChannelHalves {
    fileprivate var parts: (NIOAsyncChannelInboundStream<Inbound>, NIOAsyncChannelOutboundWriter<Outbound>) { (inbound, outbound) }
}

/// The executor a connection's requests run on: its channel's event loop. NIO runs Swift's global jobs on an event
/// loop's serial executor, so every nonisolated async function a request entered gave that executor up and queued
/// itself again to get the generic one back (`swift_task_switch`, 7 % of a proxied GraphQL request). With a task
/// executor preference the generic serial executor stays current and nothing is queued again; the task still runs
/// on the thread that reads and writes its connection.
///
/// One per event loop, for the process's life. Jobs wait in its own queue, which one closure made once drains: giving
/// the loop a closure per job allocated its context every time (as NIO's own executor did until swift-nio #2538).
final class EventLoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    let eventLoop: any EventLoop

    private struct Queued {
        var jobs: [UnownedJob] = []
        var drainScheduled = false
    }

    private let queued = Mutex(Queued())
    /// The jobs a drain runs; swapped with the queue's array, so neither is reallocated. Only touched on the loop.
    private var running: [UnownedJob] = []
    /// Made once: the loop is given this same closure for every drain.
    private var drainOnLoop: (@Sendable () -> Void)!

    private init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        drainOnLoop = { [self] in drain() }
    }

    private static let perLoop = Mutex<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    /// The executor of `eventLoop`, made the first time it is asked for.
    static func on(_ eventLoop: any EventLoop) -> EventLoopTaskExecutor {
        perLoop.withLock { executors in
            if let executor = executors[ObjectIdentifier(eventLoop)] { return executor }
            let executor = EventLoopTaskExecutor(eventLoop)
            executors[ObjectIdentifier(eventLoop)] = executor
            return executor
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let schedule = queued.withLock { queued in
            queued.jobs.append(job)
            defer { queued.drainScheduled = true }
            return !queued.drainScheduled
        }
        if schedule { eventLoop.execute(drainOnLoop) }
    }

    /// Runs the jobs queued before it began. One queued while it runs waits for the next drain, behind whatever the
    /// loop was given meanwhile, as it would have with a closure of its own.
    private func drain() {
        queued.withLock { queued in
            swap(&queued.jobs, &running)
            queued.drainScheduled = false
        }
        let executor = asUnownedTaskExecutor()
        for job in running { job.runSynchronously(on: executor) }
        running.removeAll(keepingCapacity: true)
    }
}
