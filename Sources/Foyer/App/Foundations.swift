import Logging
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

    init(config: FoyerConfig, store: Store, logger: Logger, mobileServices: MobileServices?) async throws {
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
        let languages = try Languages.bundled(defaultTag: config.defaultLocale)
        views = try await Views(
            directory: config.templatesDirectory, turboScriptURL: config.turboScriptURL, offline: config.offline, languages: languages
        )
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
