import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import NIOPosix
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#endif

/// The listening socket and its connections, as Hummingbird's `Server` runs them, with what deploys need and it has
/// no hook for: the socket bound with `SO_REUSEPORT` (a new instance starts listening beside the old one, so a
/// restart refuses nothing) or passed by systemd; and on a graceful shutdown, after the socket closes, the wait for
/// connections to end is bounded by the grace (the long-lived ones end spread over it: `Drain`).
struct DeployableServer<ChildChannel: ServerChildChannel>: Service {
    enum Listener: Sendable, CustomStringConvertible {
        case address(host: String, port: Int)
        /// A socket already bound and listening (systemd's, fd 3).
        case inherited(CInt)

        var description: String {
            switch self {
            case .address(let host, let port): "\(host):\(port)"
            case .inherited(let descriptor): "the socket systemd passed (fd \(descriptor))"
            }
        }
    }

    let childChannel: ChildChannel
    let listener: Listener
    let backlog: Int32
    let grace: Duration
    let eventLoopGroup: any EventLoopGroup
    let logger: Logger
    /// Called once the socket listens (with its channel: the port it got when 0 was asked).
    let onListening: @Sendable (any Channel) async -> Void

    func run() async throws {
        let quiescing = ServerQuiescingHelper(group: eventLoopGroup)
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(ChannelOptions.backlog, value: backlog)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(ChannelOptions.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: 1)
            .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                }
            }
        let (childChannel, logger) = (childChannel, logger)
        let setup: @Sendable (any Channel) -> EventLoopFuture<ChildChannel.Value> = { childChannel.setup(channel: $0, logger: logger) }
        let server: NIOAsyncChannel<ChildChannel.Value, Never>
        switch listener {
        case .address(let host, let port):
            server = try await bootstrap.bind(host: host, port: port, childChannelInitializer: setup)
        case .inherited(let descriptor):
            server = try await bootstrap.bind(descriptor, childChannelInitializer: setup)
        }
        let port = server.channel.localAddress?.port.map { " (port \($0))" } ?? ""
        StartupTimeline.reached("listening")
        logger.info("Server started and listening on \(listener)\(port)", metadata: StartupTimeline.metadata)
        if case .address = listener { await Self.takeNewConnections(on: server.channel, logger: logger) }
        await onListening(server.channel)

        let closed = server.channel.eventLoop.makePromise(of: Void.self)
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                do {
                    try await server.executeThenClose { inbound in
                        for try await child in inbound {
                            group.addTask { await childChannel.handle(value: child, logger: logger) }
                        }
                    }
                } catch {
                    logger.error("Waiting on child channel: \(error)")
                }
            }
        } onGracefulShutdown: { [listener] in
            Task {
                // A socket of our own is emptied first; systemd's stays open in systemd for the next process.
                if case .address = listener { await Self.stopTakingConnections(on: server.channel, logger: logger) }
                // Closes the socket, then tells every connection to finish: idle ones close at once, requests under
                // way finish first, streams and websockets end at their own moment. `closed` completes when all are.
                quiescing.initiateShutdown(promise: closed)
            }
        }
        // The connections handed over to their event loops (streams, websockets) outlive their tasks: wait for them,
        // but not past the grace, whichever comes first (settled on the socket's event loop: a future's wait cannot
        // be cancelled, so racing it in a task group would wait for it anyway).
        let eventLoop = server.channel.eventLoop
        let outcome = eventLoop.makePromise(of: Bool.self)
        let settled = NIOLockedValueBox(false)
        let settle: @Sendable (Bool) -> Void = { allClosed in
            if settled.withLockedValue({ done in defer { done = true }; return !done }) { outcome.succeed(allClosed) }
        }
        let timeout = eventLoop.scheduleTask(in: .milliseconds(Int64((grace + .seconds(1)).seconds * 1000))) { settle(false) }
        closed.futureResult.whenComplete { _ in
            timeout.cancel()
            settle(true)
        }
        let allClosed = (try? await outcome.futureResult.get()) ?? false
        if !allClosed { logger.warning("The shutdown grace passed with connections still open: they close with the process") }
    }

    /// Sends every new connection to the port to this socket rather than to one an older instance still listens on
    /// (the kernel spreads a port's connections over the sockets bound to it with `SO_REUSEPORT`). The older one then
    /// has none waiting when it closes its socket on SIGTERM: closing a socket resets the connections still queued
    /// at it. A classic BPF program for the port's group picks the socket at index 1, the one bound second: this one
    /// beside the old. Alone (index 0), the kernel finds no socket at 1 and spreads as usual.
    private static func takeNewConnections(on channel: any Channel, logger: Logger) async {
        guard let socket = channel as? any SocketOptionProvider else { return }
        do {
            try await attachProgram(returning: 1, as: Self.attachReusePortClassicBPF, to: socket)
        } catch {
            logger.warning("New connections could not be steered to this instance: an instance it replaces may reset some as it stops (\(error))")
        }
    }

    /// `SO_ATTACH_REUSEPORT_CBPF` (Linux 4.5).
    static var attachReusePortClassicBPF: CInt { 51 }

    /// Closing a listening socket resets the connections the kernel completed but the server has not accepted yet:
    /// a balancer that had sent a request on one sees it fail, and will not send a POST again. So first the socket
    /// drops every new SYN (a filter that keeps nothing: the client's kernel sends it again a second later, finds the
    /// socket closed, and the balancer tries another instance, nothing sent), and what is queued is accepted; then
    /// it can close. Waits at most half a second for the queue (`tcpi_unacked` of a listening socket) to empty.
    private static func stopTakingConnections(on channel: any Channel, logger: Logger) async {
        guard let socket = channel as? any SocketOptionProvider else { return }
        do {
            try await attachProgram(returning: 0, as: SO_ATTACH_FILTER, to: socket)  // a socket filter keeping 0 bytes
            let deadline = ContinuousClock.now + .milliseconds(500)
            while ContinuousClock.now < deadline {
                let info: tcp_info = try await socket.unsafeGetSocketOption(level: .tcp, name: NIOBSDSocket.Option(rawValue: TCP_INFO)).get()
                if info.tcpi_unacked == 0 { return }
                try await Task.sleep(for: .milliseconds(5))
            }
            logger.warning("Connections were still queued at the listening socket when it closed: they are reset")
        } catch {
            logger.warning("The listening socket could not stop taking connections before it closed: those queued then are reset (\(error))")
        }
    }
}

/// Attaches a classic BPF program of one instruction, `BPF_RET | BPF_K` with `value`, as socket option `option`
/// (`SO_ATTACH_FILTER`: the bytes of a packet kept; `SO_ATTACH_REUSEPORT_CBPF`: the socket of the group picked).
private func attachProgram(returning value: UInt32, as option: CInt, to socket: any SocketOptionProvider) async throws {
    let instruction = UnsafeMutablePointer<ClassicBPFInstruction>.allocate(capacity: 1)
    defer { instruction.deallocate() }
    instruction.initialize(to: ClassicBPFInstruction(code: 0x06, jt: 0, jf: 0, k: value))
    try await socket.unsafeSetSocketOption(
        level: .socket, name: NIOBSDSocket.Option(rawValue: option), value: ClassicBPFProgram(length: 1, instructions: instruction)
    ).get()
}

/// `struct sock_filter` (linux/filter.h).
private struct ClassicBPFInstruction {
    var code: UInt16
    var jt: UInt8
    var jf: UInt8
    var k: UInt32
}

/// `struct sock_fprog` (linux/filter.h); its instructions outlive the call that passes it.
private struct ClassicBPFProgram: @unchecked Sendable {
    var length: UInt16
    var instructions: UnsafeMutablePointer<ClassicBPFInstruction>
}
