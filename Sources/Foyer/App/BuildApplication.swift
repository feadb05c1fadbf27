import FoyerServer
import Hummingbird
import HummingbirdCore
import Logging
import NIOPosix

/// Pass `store` to share one already open (tests do); otherwise the configured database is opened and migrated.
public func buildApplication(_ config: FoyerConfig, store: Store? = nil) async throws -> some ApplicationProtocol {
    try await buildApplication(config) { logger in
        if let store { store } else { try await Store.open(config.databasePath, logger: logger) }
    }
}

/// Wiring only: makes what the features share, then the features, then the router over them. `openingStore`
/// opens the database (a fresh one migrated) while the catalogs are read and the templates compiled: neither needs
/// the other, and each was about a third of start-up.
public func buildApplication(
    _ config: FoyerConfig, openingStore: @escaping @Sendable (Logger) async throws -> Store
) async throws -> some ApplicationProtocol {
    let logger = {
        var logger = Logger(label: "foyer", metadataProvider: RequestTrace.metadataProvider)
        logger.logLevel = config.logLevel
        return logger
    }()
    // Both wait at once (the views on the blocking-work pool, the store there too or on PostgreSQL).
    async let madeViews = Foundations.views(config)
    let store = try await openingStore(logger)
    StartupTimeline.reached("database")
    let mobileServices = try config.mobileServicesFile.map { try MobileServices(contentsOf: $0) }
    let keycloakSettings = try KeycloakSettings(config: config, mobileServices: mobileServices)
    let providerSettings = try ConfiguredProviders.all(config: config, keycloak: keycloakSettings)
    let views = try await madeViews
    // Read and checked on the blocking-work pool while the features are made: its patterns' regular expressions
    // start ICU, 5 ms of an otherwise idle core.
    async let pathConfiguration = NIOThreadPool.singleton.runIfActive { try PathConfiguration(contentsOf: config.resolvedPathConfigurationFile) }
    let app = try await Foundations(config: config, store: store, logger: logger, mobileServices: mobileServices, views: views)

    let push = try PushFeature(app)
    let sessions = SessionsFeature(app, ending: push.sessionEnding)
    let providers = ProvidersFeature(app, keycloak: keycloakSettings, settings: providerSettings, sessions: sessions.sessions)
    let passkeys = try PasskeysFeature(app)
    let signIn = SignInFeature(app, sessions: sessions, providers: providers.providers, passkeys: passkeys.passkeys)
    let accounts = AccountsFeature(app, sessions: sessions, push: push)
    let moderation = try await ModerationFeature(app, mail: accounts.mail)
    let posts = PostsFeature(app, rules: moderation.rules, blocks: moderation.blocks)
    let idempotency = IdempotencyFeature(app)
    let tasks = try TasksFeature(app, push: push, providers: providers, idempotency: idempotency.keys)
    // A local demo account is no use when the realm checks every password.
    let readiness = Readiness(ready: providers.keycloak != nil || config.demoAccount == nil)
    let listening = ServerListening()
    if providers.keycloak == nil, let account = config.demoAccount {
        app.run(DemoSeeding(
            account: account, users: sessions.users, posts: posts.posts, readiness: readiness, listening: listening, logger: logger
        ))
    }
    if config.managesProcessMemory { app.run(StartupCodePages(readiness: readiness)) }

    let (router, errors) = try buildRouter(
        app, pathConfiguration: try await pathConfiguration, readiness: readiness, push: push, sessions: sessions, providers: providers, signIn: signIn, accounts: accounts, posts: posts,
        moderation: moderation, tasks: tasks, idempotency: idempotency, passkeys: passkeys
    )
    let webSockets = tasks.webSockets(authenticator: signIn.authenticator, holds: sessions.holds, drain: app.drain)
    let edge = Edge(settings: config.edge, metrics: app.metrics.server) { EdgeAnswer.refusing($0, views: app.views) }
    if config.managesProcessMemory { app.run(FreedMemoryTrim(connections: edge.connections, logger: logger)) }

    StartupTimeline.reached("features")
    let responder = RequestTaskResponder(wrapped: SecurityHeadersResponder(wrapped: DrainingResponder(
        wrapped: MethodOverrideResponder(wrapped: router.router.buildResponder(), errors: errors), drain: app.drain
    )))
    return try await FoyerApplication(
        responder: responder, services: app.services, logger: logger, hostname: config.hostname, port: config.port, edge: edge,
        webSockets: webSockets.upgrades, https: config.https, acmeStorage: app.store.acmeStorage, drain: app.drain, listening: listening,
        open: { [streams = app.streams] in
            ["connections": "\(edge.connections.openCount)", "event_streams": "\(streams.subscriberCount)"]
        }
    )
}

/// The middleware every request passes, in order, and each feature's routes.
func buildRouter(
    _ app: Foundations, pathConfiguration: PathConfiguration, readiness: Readiness, push: PushFeature, sessions: SessionsFeature, providers: ProvidersFeature, signIn: SignInFeature,
    accounts: AccountsFeature, posts: PostsFeature, moderation: ModerationFeature, tasks: TasksFeature, idempotency: IdempotencyFeature,
    passkeys: PasskeysFeature
) throws -> (FoyerRouter, ErrorMiddleware) {
    let (config, views) = (app.config, app.views)
    let router = FoyerRouter(options: .autoGenerateHeadEndpoints)
    let errors = ErrorMiddleware(views: views, signInForm: SignInForm(views: views, signIn: signIn.signIn))
    router.add(middleware: EveryRequestMiddleware(
        log: RequestLogMiddleware(metrics: app.metrics),
        compression: CompressionMiddleware(),
        errors: errors,
        methodNotAllowed: MethodNotAllowedMiddleware(methods: router.methods, errors: errors),
        publicFiles: PublicFiles(directory: config.publicDirectory, logger: app.logger),
        keycloakProxy: try providers.proxyMiddleware(trustProxy: config.trustProxy),
        authentication: AuthenticationMiddleware(authenticator: signIn.authenticator),
        csrf: CSRFMiddleware(),
        idempotency: idempotency.middleware
    ))

    HealthController(store: app.store, readiness: readiness, drain: app.drain).addRoutes(to: router)
    MetricsController(metrics: app.metrics, token: config.metricsToken).addRoutes(to: router)
    HomeController(views: views).addRoutes(to: router)
    PathConfigurationController(configuration: pathConfiguration).addRoutes(to: router)
    try OfflineFeature(config: config, views: views, rules: pathConfiguration.offline).addRoutes(to: router)
    MobileServicesController(services: app.mobileServices ?? .embedded, keycloak: providers.keycloakSettings).addRoutes(to: router)
    HistoricalLocationController(views: views).addRoutes(to: router)
    signIn.addRoutes(to: router, views: views)
    accounts.addRoutes(to: router, signIn: signIn.signIn, views: views, posts: posts.posts)
    passkeys.addRoutes(to: router, accounts: accounts)
    providers.addRoutes(to: router, signIn: signIn.signIn, views: views)
    moderation.addRoutes(to: router, views: views, signIn: signIn.signIn, posts: posts.posts)
    posts.addRoutes(to: router, views: views, streams: app.streams, config: config, metrics: app.metrics)
    LiveStreamController(streams: app.streams, metrics: app.metrics, holds: sessions.holds, blocks: moderation.blocks).addRoutes(to: router)
    push.addRoutes(to: router)
    tasks.addRoutes(to: router, views: views, streams: app.streams)
    return (router, errors)
}
