import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Foyer's application: Hummingbird's, whose responder, services and settings the test clients use as they are,
/// run by Foyer itself (`run`) so that a deploy goes unnoticed: its own listening socket (`DeployableServer`), and
/// SIGTERM drained (`Drain`) rather than ending everything at once.
public struct FoyerApplication<Responder: HTTPResponder>: ApplicationProtocol
where Responder.Context: RequestContext, Responder.Context.Source == ApplicationRequestContextSource {
    let base: Application<Responder>
    /// Each connection's channel, given the HTTP/1.1 responder (HTTP/2's streams are answered by what its TLS carries).
    let childChannel: @Sendable (@escaping HTTPChannelHandler.Responder) -> EdgeGuardedChannel
    /// The `Date` header's value; a service of the application's, so that test clients run it too.
    let dates: HTTPDates
    let drain: Drain
    /// `--hostname` and `--port`, unless systemd passed a socket.
    let listener: DeployableServer<EdgeGuardedChannel>.Listener
    let backlog: Int32
    /// What is open now, for the drain's log lines.
    let open: @Sendable () -> Logger.Metadata
    /// HTTPS: the certificate files watched for changes, or the ACME certificates kept renewed, while the server runs.
    let certificates: (any ServedCertificates)?
    /// HTTPS: the plain-HTTP port and what answers there (the redirect to https://).
    let redirect: (listener: DeployableServer<EdgeGuardedChannel>.Listener, channel: EdgeGuardedChannel)?

    public var responder: Responder { base.responder }
    public var server: HTTPServerBuilder { base.server }
    public var configuration: ApplicationConfiguration { base.configuration }
    public var logger: Logger { base.logger }
    public var eventLoopGroup: any EventLoopGroup { base.eventLoopGroup }
    public var services: [any Service] { base.services }
    @Sendable public func onServerRunning(_ channel: any Channel) async { await base.onServerRunning(channel) }
    public var processesRunBeforeServerStart: [@Sendable () async throws -> Void] { base.processesRunBeforeServerStart }

    /// The server layer around `responder`: the edge on every connection, websockets where `webSockets` says, HTTPS
    /// from certificate files or ACME (the plain port then redirects, and answers ACME's challenges), HTTP/2 where
    /// TLS negotiates it, and the deploy's listener and drain. `listening` is told when the socket listens.
    public init(
        responder: Responder, services: [any Service], logger: Logger, hostname: String, port: Int, edge: Edge,
        webSockets: WebSocketUpgrades?, https: HTTPSSettings, acmeStorage: ACMEStorage, drain: Drain,
        listening: ServerListening, open: @escaping @Sendable () -> Logger.Metadata
    ) async throws {
        var acme: ACMECertificates?
        if let settings = https.acme { acme = try await ACMECertificates(settings: settings, store: acmeStorage, logger: logger) }
        let certificates: (any ServedCertificates)? = try https.certificateFile.map { certificate in
            do {
                return try CertificateFiles(certificate: certificate, key: https.keyFile ?? "", logger: logger)
            } catch {
                throw StartupError("--tls-certificate, --tls-key: \(error)")
            }
        } ?? acme
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [CloseAfterResponse()], idleTimeout: edge.idleTimeout, httpDecoderConfiguration: EdgeGuardedChannel.decoderLimits
        )
        let shutdownGrace = drain.settings.shutdownGrace
        let dates = HTTPDates()
        let serverName = Self.serverName
        let tls = certificates.map { certificates in
            let answer: HTTP2Connection.Answer = { request, channel in
                try await Self.answer(request, channel: channel, responder: responder, logger: logger, dates: dates, serverName: serverName)
            }
            return (certificates: certificates, answer: answer)
        }
        childChannel = { responder in
            EdgeGuardedChannel(
                responder: responder, http1: http1, webSockets: webSockets, edge: edge, tls: tls, shutdownGrace: shutdownGrace
            )
        }
        redirect = https.plainHTTPPort.map { plainPort in
            (
                listener: .address(host: hostname, port: plainPort),
                channel: EdgeGuardedChannel(
                    responder: HTTPSRedirect.responder(httpsPort: port, challenges: acme), http1: http1, webSockets: nil, edge: edge
                )
            )
        }
        base = Application(
            responder: responder,
            server: HTTPServerBuilder { [childChannel] in childChannel($0) },
            configuration: .init(address: .hostname(hostname, port: port), serverName: serverName, backlog: EdgeSettings.listenBacklog),
            services: services + [dates],
            onServerRunning: { _ in listening.listened() },
            logger: logger
        )
        self.dates = dates
        self.drain = drain
        listener = drain.settings.inheritedListener.map { .inherited($0) } ?? .address(host: hostname, port: port)
        backlog = Int32(EdgeSettings.listenBacklog)
        self.open = open
        self.certificates = certificates
    }

    static var serverName: String { "Foyer" }

    /// The application's response to one request, with the fields every response carries. Inlined into both of its
    /// callers: an async call of its own would be one more task switch per request.
    @inline(__always)
    private static func answer(
        _ request: Request, channel: any Channel, responder: Responder, logger: Logger, dates: HTTPDates, serverName: String?
    ) async throws -> Response {
        // No `hb.request.id` in the logger: RequestLogMiddleware names the request (so `context.id`, which would
        // read it, is never asked).
        let context = Responder.Context(source: .init(channel: channel, logger: logger))
        var response: Response
        do {
            response = try await responder.respond(to: request, context: context)
        } catch let error as HTTPParserError {
            throw error
        } catch {
            logger.debug("Unrecognised Error", metadata: ["error.type": "\(error)"])
            response = Response(status: .internalServerError)
        }
        response.headers[.date] = dates.now
        if let serverName { response.headers[.server] = serverName }
        return response
    }

    /// Serves until SIGTERM or SIGINT has been drained: `/healthz` answers 503 for the drain delay while requests
    /// are still served, then the socket closes, requests under way finish, and streams and websockets end spread
    /// over the grace. A second signal ends the process at once.
    public func run() async throws {
        let (responder, logger, drain, open) = (responder, logger, drain, open)
        let (dates, serverName) = (dates, Self.serverName)
        let server = DeployableServer(
            childChannel: childChannel { request, responseWriter, channel in
                let response = try await Self.answer(request, channel: channel, responder: responder, logger: logger, dates: dates, serverName: serverName)
                do {
                    try await responseWriter.write(response: response.head, body: response.body)
                } catch is HTTPParserError {
                    // Not rethrown as it is: the connection's loop would answer it with a second response.
                    throw ParseErrorWhileWritingResponse()
                }
            },
            listener: listener,
            backlog: backlog, grace: drain.settings.shutdownGrace, eventLoopGroup: eventLoopGroup, logger: logger,
            onListening: { channel in await base.onServerRunning(channel) }
        )
        let redirecting = redirect.map { redirect in
            DeployableServer(
                childChannel: redirect.channel, listener: redirect.listener, backlog: backlog, grace: drain.settings.shutdownGrace,
                eventLoopGroup: eventLoopGroup, logger: logger, onListening: { _ in }
            )
        }
        // The servers last: they are the first told to stop, and the services they use go on until they have.
        let ownServices: [any Service] = (certificates.map { [$0 as any Service] } ?? []) + (redirecting.map { [$0] } ?? []) + [server]
        // Named by type: ServiceLifecycle's default name is `"\(service)"`, which for a service without a description
        // prints every stored property through reflection (the router, the views…): a sixth of start-up.
        let named = (services + ownServices).map {
            ServiceGroupConfiguration.ServiceConfiguration(service: $0, serviceName: "\(type(of: $0))")
        }
        let group = ServiceGroup(configuration: .init(services: named, logger: logger))
        let signals = Task { await Self.drainOnSignals(drain: drain, logger: logger, open: open) { await group.triggerGracefulShutdown() } }
        defer { signals.cancel() }
        try await group.run()
        if let began = drain.beganAt {
            logger.info("Drained and stopped", metadata: ["since_signal": "\(ContinuousClock.now - began)"].merging(open()) { $1 })
        }
    }

    struct ParseErrorWhileWritingResponse: Error {}

    private static func drainOnSignals(
        drain: Drain, logger: Logger, open: @escaping @Sendable () -> Logger.Metadata, stop: @escaping @Sendable () async -> Void
    ) async {
        var stopping: Task<Void, Never>?
        for await signal in await UnixSignalsSequence(trapping: .sigterm, .sigint) {
            guard stopping == nil else {
                logger.notice("\(signal) again: stopping at once")
                exit(1)
            }
            // SIGTERM is a deploy's (a balancer to wait for, reconnects to spread); SIGINT is Ctrl-C in a terminal:
            // requests under way finish, and nothing else is waited for.
            let byHand = signal == .sigint
            let settings = drain.settings
            logger.info(
                byHand
                    ? "\(signal): stopping; requests under way finish"
                    : "\(signal): draining. /healthz answers 503; requests are served for the drain delay, then the socket closes",
                metadata: ["drain_delay": "\(byHand ? .zero : settings.drainDelay)", "shutdown_grace": "\(settings.shutdownGrace)"].merging(open()) { $1 }
            )
            drain.begin(atOnce: byHand)
            stopping = Task {
                if !byHand { try? await Task.sleep(for: settings.drainDelay) }
                logger.info("Drain delay over: no new connections; streams and websockets end spread over the grace", metadata: open())
                await stop()
            }
        }
    }
}

/// The `Date` header's value, made once a second (Hummingbird keeps its own such cache to itself).
final class HTTPDates: Service {
    private let current = Mutex(HTTPDates.format(Date()))

    var now: String { current.withLock { $0 } }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while (try? await Task.sleep(for: .seconds(1))) != nil {
                let formatted = HTTPDates.format(Date())
                self.current.withLock { $0 = formatted }
            }
        }
    }

    /// RFC 9110's IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func format(_ date: Date) -> String {
        var time = time_t(date.timeIntervalSince1970)
        var parts = tm()
        gmtime_r(&time, &parts)
        var buffer = [CChar](repeating: 0, count: 40)
        let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
