import AsyncHTTPClient
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import ServiceLifecycle

/// Wiring only: opens what the features need and gives each its routes.
/// Pass `store` to share one already open (tests do); otherwise the configured database is opened and migrated.
public func buildApplication(
    _ config: FoyerConfig, store: Store? = nil
) async throws -> some ApplicationProtocol {
    var logger = Logger(label: "foyer", metadataProvider: RequestTrace.metadataProvider)
    logger.logLevel = config.logLevel
    let metrics = config.metrics ?? FoyerMetrics()

    var services: [any Service] = []
    let store = if let store { store } else { try await Store.open(config.databasePath, logger: logger) }
    // Instances sharing a PostgreSQL database tell each other what changed (see followOtherInstances).
    var signals: ClusterSignals?
    if case .postgres(let postgres) = store {
        services.append(ClosingService { postgres.close() })
        signals = ClusterSignals(store: postgres, logger: logger)
        services.append(signals!)
    }
    let pathConfiguration = try PathConfiguration(contentsOf: config.resolvedPathConfigurationFile)
    let mobileServices = try config.mobileServicesFile.map { try MobileServices(contentsOf: $0) }
    let pushRelay = try PushSettings(config: config, mobileServices: mobileServices).map { settings in
        let http = UnifiedPushClient.makeHTTPClient()
        services.append(ClosingService { try await http.shutdown() })
        let relay = PushRelay(
            devices: PushDevices(store: store), client: UnifiedPushClient(settings: settings, http: http), logger: logger,
            delivered: { [signals] operation, outcome in signals?.send(.pushOutcome(operation, outcome)) }
        )
        services.append(relay)
        logger.info("Relaying device registrations to Unified Push", metadata: [
            "url": .string(settings.baseURL), "variants": .string(settings.variants.keys.map(\.displayName).sorted().joined(separator: ", ")),
            "task_notifications": .stringConvertible(settings.notifyTasks),
        ])
        return relay
    }
    let users = UserRepository(store: store, passwordHashCost: config.passwordHashCost)
    // A session that ends takes the push registrations made through it along.
    let sessions = SessionStore(
        store: store, lifetime: config.sessionLifetime,
        ending: pushRelay.map { relay in
            SessionEnding(
                sqlite: { db, ids in try SQLitePushStorage.sessionsEnding(ids, db: db) },
                postgres: { [logger] connection, ids in try await PostgresPushStorage.sessionsEnding(ids, connection: connection, logger: logger) },
                afterwards: { relay.wake() }
            )
        },
        revoked: { [signals] id in signals?.send(.sessionsEnded([id])) }
    )
    let throttle = SignInThrottle(store: store)

    let keycloakSettings = try KeycloakSettings(config: config, mobileServices: mobileServices)
    let views = try await Views(directory: config.templatesDirectory, turboScriptURL: config.turboScriptURL, keycloakSignIn: keycloakSettings != nil)
    services.append(SessionPruning(sessions: sessions, throttle: throttle, logger: logger))
    let streams = LiveStreams(names: StreamNames(secret: try await StreamNames.secret(configured: config.streamSecret, store: store)))
    services.append(LiveHeartbeatService(streams: streams))
    let postStreams = PostStreams(views: views)
    let broadcastPost: @Sendable (PostChange) -> Void = { change in streams.broadcast(postStreams.html(for: change), on: .posts) }
    let posts = PostRepository(store: store) { [signals] change in
        broadcastPost(change)
        signals?.send(change.signal)
    }
    let upstream = GraphQLUpstream(config: config, mobileServices: mobileServices)
    let notifyTasks = pushRelay.flatMap { $0.client.settings.notifyTasks ? $0 : nil }
    // Foyer's own mutations at a remote task server name their authors, so the upstream's events can skip them.
    let remoteAuthors = upstream != nil && notifyTasks != nil
        ? RecentTaskAuthors { [signals] ids, userID in signals?.send(.tasksAuthored(ids, userID: userID)) } : nil
    let taskBroadcasts = TaskBroadcasts(
        streams: streams, fragments: TaskStreams(views: views),
        notifications: notifyTasks.map { relay in
            TaskNotifications(
                devices: relay.devices, relay: relay, remoteAuthors: remoteAuthors,
                speaksForTheUpstream: { [signals] in signals?.isLeader ?? true }, logger: logger
            )
        }
    )
    let keycloak = keycloakSettings.map { settings in
        let http = KeycloakClient.makeHTTPClient()
        services.append(ClosingService { try await http.shutdown() })
        logger.info("Signing in with Keycloak", metadata: ["realm": .string(settings.realmURL), "client": .string(settings.clientID)])
        return KeycloakSessions(
            client: KeycloakClient(settings: settings, http: http, metrics: metrics), store: store, sessions: sessions,
            trustProxy: config.trustProxy, logger: logger
        )
    }
    // A local demo account is no use when the realm checks every password.
    let readiness = Readiness(ready: keycloak != nil || config.demoAccount == nil)
    if keycloak == nil, let account = config.demoAccount {
        services.append(DemoSeeding(account: account, users: users, posts: posts, readiness: readiness, logger: logger))
    }
    let signIn = SignIn(
        users: users, sessions: sessions, keycloak: keycloak, throttle: throttle, secureCookies: config.secureCookies,
        trustProxy: config.trustProxy, sessionLifetime: config.sessionLifetime, metrics: metrics
    )
    let graphQL: any GraphQLExecutor
    var embedded: EmbeddedGraphQLExecutor?
    if let upstream {
        let connections = try UpstreamConnections(url: upstream.url)
        services.append(ClosingService { connections.close() })
        graphQL = RemoteGraphQLExecutor(webSocketURL: upstream.webSocketURL, connections: connections, metrics: metrics, authors: remoteAuthors)
        let (upstreamToken, keycloakClient) = (config.graphQLUpstreamToken, config.keycloakClientSecret == nil ? nil : keycloak?.client)
        services.append(UpstreamTaskFeed(
            webSocketURL: upstream.webSocketURL,
            token: {
                if let upstreamToken { return upstreamToken }
                return try await keycloakClient?.clientCredentialsGrant().accessToken
            },
            broadcasts: taskBroadcasts, logger: logger
        ))
    } else {
        let service = try EmbeddedGraphQLExecutor(store: EmbeddedTaskStore(store: store))
        service.events.observe { [signals] kind, task, relayed in
            taskBroadcasts.publish(kind, task.item, notify: !relayed)
            if !relayed { signals?.send(.taskChanged(kind.rawValue, .init(task))) }
        }
        embedded = service
        graphQL = service
    }
    let upstreamToken = config.graphQLUpstreamToken
    if let signals {
        followOtherInstances(
            signals, sessions: sessions, posts: posts, broadcastPost: broadcastPost, streams: streams, embedded: embedded,
            taskBroadcasts: taskBroadcasts, remoteAuthors: remoteAuthors, pushRelay: pushRelay
        )
    }

    let router = FoyerRouter(options: .autoGenerateHeadEndpoints)
    router.add(middleware: RequestLogMiddleware(metrics: metrics))
    router.add(middleware: CompressionMiddleware())
    let errors = ErrorMiddleware(views: views, signInForm: SignInForm(views: views, signIn: signIn))
    router.add(middleware: errors)
    router.add(middleware: MethodNotAllowedMiddleware(methods: router.methods, errors: errors))
    router.add(middleware: FileMiddleware(config.publicDirectory, logger: logger))
    if let keycloak {
        router.add(middleware: try KeycloakProxyMiddleware(settings: keycloak.client.settings, http: keycloak.client.http, trustProxy: config.trustProxy))
    }
    let authenticator = Authenticator(sessions: sessions, keycloak: keycloak)
    router.add(middleware: AuthenticationMiddleware(authenticator: authenticator))
    router.add(middleware: CSRFMiddleware())

    HealthController(store: store, readiness: readiness).addRoutes(to: router)
    MetricsController(metrics: metrics, token: config.metricsToken).addRoutes(to: router)
    HomeController(views: views).addRoutes(to: router)
    PathConfigurationController(configuration: pathConfiguration).addRoutes(to: router)
    MobileServicesController(services: mobileServices ?? .embedded, keycloak: keycloakSettings).addRoutes(to: router)
    HistoricalLocationController(views: views).addRoutes(to: router)
    SessionsAPIController(signIn: signIn).addRoutes(to: router)
    WebSessionController(signIn: signIn, views: views).addRoutes(to: router)
    AccountController(signIn: signIn, views: views).addRoutes(to: router)
    if let keycloak {
        KeycloakBrowserSignInController(keycloak: keycloak, signIn: signIn, views: views).addRoutes(to: router)
        BackChannelLogoutController(keycloak: keycloak).addRoutes(to: router)
    }
    PostsAPIController(posts: posts).addRoutes(to: router)
    PostsController(posts: posts, views: views, streams: streams, fragments: postStreams).addRoutes(to: router)
    LiveStreamController(streams: streams, metrics: metrics).addRoutes(to: router)
    DevicesAPIController(relay: pushRelay).addRoutes(to: router)
    let upstreamCredentials: UpstreamCredentialSource = { identity in
        // A Keycloak session relays its own access token; other sessions the configured one, if any.
        UpstreamCredentials(bearerToken: try await keycloak?.accessToken(for: identity) ?? upstreamToken, userID: identity.userId)
    }
    // Only Keycloak users have realm roles; local accounts are not restricted by role.
    let realmRoles: RealmRoleSource = { identity in try await keycloak?.realmRoles(of: identity) }
    GraphQLController(executor: graphQL, credentials: upstreamCredentials).addRoutes(to: router)
    let taskRepository = TaskRepository(client: TaskClient(executor: graphQL), copies: store.taskCopyStorage, metrics: metrics)
    TasksController(
        tasks: taskRepository, views: views, credentials: upstreamCredentials, roles: realmRoles, streams: streams,
        fragments: taskBroadcasts.fragments
    ).addRoutes(to: router)

    let webSocketRouter = Router(context: BasicWebSocketRequestContext.self)
    GraphQLWebSocketController(executor: graphQL, authenticator: authenticator, credentials: upstreamCredentials, metrics: metrics).addRoutes(to: webSocketRouter)

    return Application(
        responder: RequestTaskResponder(wrapped: SecurityHeadersResponder(
            wrapped: MethodOverrideResponder(wrapped: router.router.buildResponder(), errors: errors)
        )),
        server: .http1WebSocketUpgrade(webSocketRouter: webSocketRouter, configuration: .init(ws: .init(maxFrameSize: GraphQLController.maximumBodySize))),
        configuration: .init(address: .hostname(config.hostname, port: config.port), serverName: "Foyer"),
        services: services,
        logger: logger
    )
}

/// What other instances' signals change here. With a remote task server every instance holds its own upstream
/// subscription (the upstream fans out; no instance must be elected or failed over for live pages), so only the
/// embedded service's changes travel between instances; what must happen once per upstream event (a push
/// notification) is done by the leader, and the authors of Foyer's own mutations travel so it knows them.
private func followOtherInstances(
    _ signals: ClusterSignals, sessions: SessionStore, posts: PostRepository, broadcastPost: @escaping @Sendable (PostChange) -> Void,
    streams: LiveStreams, embedded: EmbeddedGraphQLExecutor?, taskBroadcasts: TaskBroadcasts, remoteAuthors: RecentTaskAuthors?, pushRelay: PushRelay?
) {
    signals.onSignal { signal in
        switch signal {
        case .sessionsEnded(let ids):
            for id in ids { sessions.cache.forget(sessionID: id) }
        case .postChanged(let kind, let id):
            posts.generation.bump()
            switch kind {
            case .deleted: broadcastPost(.deleted(id: id))
            case .created, .updated:
                // The post as stored now: a later change may have come meanwhile, and its own signal follows.
                guard let post = try? await posts.find(id: id) else { return }
                broadcastPost(kind == .created ? .created(post) : .updated(post))
            }
        case .taskChanged(let kind, let task):
            guard let kind = TaskEvents.Kind(rawValue: kind) else { return }
            embedded?.events.publish(kind, task.record, relayed: true)
        case .taskStored(let kind, let id):
            guard let embedded, let kind = TaskEvents.Kind(rawValue: kind) else { return }
            // A deleted task cannot be read back: pages load their lists again instead.
            guard kind != .deleted else { return taskBroadcasts.reload() }
            if let task = try? await embedded.store.find(id: id) { embedded.events.publish(kind, task, relayed: true) }
        case .tasksAuthored(let ids, let userID):
            remoteAuthors?.remember(ids, userID: userID)
        case .pushOutcome(let operation, let outcome):
            pushRelay?.heard(operation, outcome)
        }
    }
    signals.onBreak {
        sessions.cache.forgetAll()
        posts.generation.bump()
    }
    signals.onGap {
        sessions.cache.forgetAll()
        posts.generation.bump()
        streams.broadcastReload(on: .posts)
        taskBroadcasts.reload()
    }
}
