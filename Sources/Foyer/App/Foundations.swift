import FoyerServer
import Logging
import NIOPosix
import ServiceLifecycle

/// What every feature builds on, made once by `buildApplication`: settings, logging, metrics, the store, the
/// cluster bus (with several instances), views and live streams. Features add the services they run here.
final class Foundations {
    let config: FoyerConfig
    let logger: Logger
    let metrics: FoyerMetrics
    let store: Store
    /// Set when instances share a PostgreSQL database; features register their own topics on it.
    let cluster: ClusterBus?
    let mobileServices: MobileServices?
    let views: Views
    let streams: LiveStreams
    /// Whether this instance is on its way out, and when its long-lived connections end.
    let drain: Drain
    private(set) var services: [any Service]

    /// `views`: made by `Foundations.views(config)`, while the store opened.
    init(config: FoyerConfig, store: Store, logger: Logger, mobileServices: MobileServices?, views: Views) async throws {
        (self.config, self.store, self.logger, self.mobileServices) = (config, store, logger, mobileServices)
        metrics = config.metrics ?? FoyerMetrics()
        services = []
        if case .postgres(let postgres) = store {
            services.append(ClosingService { postgres.close() })
            let cluster = ClusterBus(store: postgres, logger: logger)
            services.append(cluster)
            self.cluster = cluster
        } else {
            cluster = nil
        }
        self.views = views
        let languages = views.languages
        let metrics = self.metrics
        drain = Drain(settings: config.deploy)
        streams = LiveStreams(
            names: StreamNames(secret: try await StreamNames.secret(configured: config.streamSecret, store: store)), languages: languages,
            journal: try await LiveJournal.open(store: store, cluster: cluster, logger: logger), drain: drain,
            resumed: { metrics.liveResumed($0) }
        )
        try await streams.loadJournal()
        services.append(LiveHeartbeatService(streams: streams))
        services.append(LiveJournalService(streams: streams))
    }

    /// The catalogs read and the default language's templates compiled: needs no store, so `buildApplication` makes
    /// them while the database opens. On the blocking-work pool: the global executor is the event loops, and tens of
    /// milliseconds of compiling there kept the database's own start waiting behind it.
    static func views(_ config: FoyerConfig) async throws -> Views {
        try await NIOThreadPool.singleton.runIfActive {
            let languages = try Languages.bundled(defaultTag: config.defaultLocale)
            let views = try Views(
                directory: config.templatesDirectory, turboScriptURL: config.turboScriptURL, offline: config.offline, languages: languages
            )
            // When they were compiled, which is often before the database is open, not when the start awaits them.
            StartupTimeline.reached("templates")
            return views
        }
    }

    /// Runs `service` with the application, started in the order added.
    func run(_ service: any Service) { services.append(service) }

    /// Runs `close` when the application stops.
    func closeOnShutdown(_ close: @escaping @Sendable () async throws -> Void) { services.append(ClosingService(close: close)) }

    /// What only the instance that leads the others may do: set with several instances, when a feature asked.
    private(set) lazy var leadership: ClusterLeadership? = {
        guard case .postgres(let postgres) = store else { return nil }
        let leadership = ClusterLeadership(store: postgres, logger: logger)
        run(leadership)
        return leadership
    }()
}
