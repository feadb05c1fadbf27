import FoyerServer
import Hummingbird

/// Tasks: the task service (the embedded one, or a remote task server and its event feed), the task pages, the
/// `/graphql` proxy in front of it, and every task change reaching pages, devices and the other instances.
struct TasksFeature {
    /// A change the embedded service stored on another instance (a remote task server's events reach every
    /// instance through its own feed instead).
    static let changed = ClusterTopic<TaskChange>("tasks.changed")
    /// Who made changes at a remote task server through another instance (its events do not say).
    static let authored = ClusterTopic<TaskAuthors.Authored>("tasks.authored")

    let changes: TaskChanges
    /// Set when push notifications want to know who made each change.
    let authors: TaskAuthors?
    let fragments: TaskFragments
    let executor: any GraphQLExecutor
    let credentials: UpstreamCredentialSource
    let roles: RealmRoleSource
    let metrics: FoyerMetrics
    let copies: any TaskCopyStorage
    let admission: GraphQLAdmission
    let batchLimit: Int
    let rateLimit: CallerRateLimit?
    let idempotency: IdempotencyKeys
    let answers: QueryAnswers

    init(_ app: Foundations, push: PushFeature, providers: ProvidersFeature, idempotency: IdempotencyKeys) throws {
        self.idempotency = idempotency
        let (changes, cluster, config) = (TaskChanges(), app.cluster, app.config)
        self.changes = changes
        fragments = TaskFragments(views: app.views)
        let upstream = GraphQLUpstream(config: config, mobileServices: app.mobileServices)
        let upstreamLeadership = upstream == nil ? nil : app.leadership
        var speaksForTheUpstream: (@Sendable () -> Bool)?
        if upstream != nil { speaksForTheUpstream = { upstreamLeadership?.isLeader ?? true } }
        TaskPages(streams: app.streams, fragments: fragments, speaksForTheUpstream: speaksForTheUpstream).follow(changes)
        // Upstream events that came while no instance led (the last leader stopped, this one had not yet taken over)
        // reached no page: open task pages load their tasks again.
        upstreamLeadership?.whenLeading { [streams = app.streams] in streams.broadcastReload(on: .tasks) }
        var executor: any GraphQLExecutor
        let answers: QueryAnswers
        if let upstream {
            let connections = try UpstreamConnections(url: upstream.url)
            app.closeOnShutdown { connections.close() }
            executor = RemoteGraphQLExecutor(webSocketURL: upstream.webSocketURL, connections: connections, metrics: app.metrics)
            // The feed signs in as Foyer itself: the configured token, or Keycloak's client credentials.
            let (configuredToken, keycloakClient) = (config.graphQLUpstreamToken, config.keycloakClientSecret == nil ? nil : providers.keycloak?.client)
            var feed = UpstreamTaskFeed(
                webSocketURL: upstream.webSocketURL,
                token: {
                    if let configuredToken { return configuredToken }
                    return try await keycloakClient?.clientCredentialsGrant().accessToken
                },
                changes: changes, logger: app.logger
            )
            // Answers that read tasks are trusted while the upstream's own feed is followed, and only then.
            answers = QueryAnswers(settings: config.graphQLCache, metrics: app.metrics) { [feed] in feed.isFollowing }
            feed.onFollowing = { answers.tasksMayHaveChanged() }
            app.run(feed)
        } else {
            executor = try EmbeddedGraphQLExecutor(store: EmbeddedTaskRepository(store: app.store), changes: changes)
            // The embedded service's own changes are heard at once; other instances' while the cluster is heard.
            answers = QueryAnswers(settings: config.graphQLCache, metrics: app.metrics) { [cluster] in cluster?.isListening ?? true }
        }
        changes.listen { _ in answers.tasksMayHaveChanged() }

        // Foyer's own mutations name their authors, so devices are not told of their own changes.
        authors = push.notifiesOfTasks ? TaskAuthors { cluster?.send($0, on: Self.authored) } : nil
        if let authors {
            cluster?.on(Self.authored) { authors.remember($0) }
            executor = TaskAuthorship(wrapping: executor, authors: authors)
            push.notifyOfTasks(changes, authors: authors, leadership: upstreamLeadership)
        }
        if let cluster {
            changes.listen { event in
                if case .change(let change) = event, change.origin == .embedded { cluster.send(change, on: Self.changed) }
            }
            cluster.on(Self.changed) { change in
                var relayed = change
                relayed.origin = .otherInstance
                changes.publish(relayed)
            }
            cluster.onGap { changes.missed() }
        }

        // Outermost, so that the pages' reads and every mutation pass through it too.
        self.executor = SharedAnswers(wrapping: executor, answers: answers)
        self.answers = answers
        rateLimit = config.graphQLRateLimit.map { CallerRateLimit($0, metrics: app.metrics) }
        credentials = UpstreamCredentials.source(providers: providers.providers, configuredToken: config.graphQLUpstreamToken)
        roles = providers.roles
        metrics = app.metrics
        copies = app.store.taskCopyStorage
        // The task pages' own operations call the executor directly: trusted documents govern /graphql's clients.
        admission = GraphQLAdmission(
            persisted: PersistedDocuments(storage: app.store.persistedDocumentStorage),
            trusted: try config.graphQLTrustedDocumentsFile.map(TrustedDocuments.load),
            allowsIntrospection: config.graphQLIntrospection, metrics: app.metrics
        )
        batchLimit = config.graphQLBatchLimit
    }

    func addRoutes(to router: FoyerRouter, views: Views, streams: LiveStreams) {
        GraphQLController(
            executor: executor, credentials: credentials, admission: admission, batchLimit: batchLimit, rateLimit: rateLimit, idempotency: idempotency,
            answers: answers
        ).addRoutes(to: router)
        TasksController(
            tasks: TaskRepository(client: TaskClient(executor: executor), copies: copies, metrics: metrics), views: views,
            credentials: credentials, roles: roles, streams: streams, fragments: fragments
        ).addRoutes(to: router)
    }

    /// What serves websocket `/graphql`, once the edge has upgraded a connection.
    func webSockets(authenticator: Authenticator, holds: SessionHolds, drain: Drain) -> GraphQLWebSocketController {
        GraphQLWebSocketController(
            executor: executor, authenticator: authenticator, credentials: credentials, metrics: metrics, holds: holds, admission: admission,
            rateLimit: rateLimit, drain: drain
        )
    }
}
