import Logging

/// Device registrations relayed to Unified Push (when configured), the devices API, and task notifications.
struct PushFeature {
    /// What Unified Push answered to an outbox operation: with several instances the request waiting for it may
    /// be on another one, whose relay found this one at the outbox.
    struct Delivered: Codable, Sendable, Equatable {
        let operation: Int64
        let outcome: UnifiedPushClient.Answer
    }
    static let delivered = ClusterTopic<Delivered>("push.delivered")

    /// Nil when no Unified Push server is configured: the devices API then says so.
    let relay: PushRelay?

    init(_ app: Foundations) throws {
        guard let settings = try PushSettings(config: app.config, mobileServices: app.mobileServices) else {
            relay = nil
            return
        }
        let http = UnifiedPushClient.makeHTTPClient()
        app.closeOnShutdown { try await http.shutdown() }
        let cluster = app.cluster
        let relay = PushRelay(
            devices: PushDeviceRepository(store: app.store), client: UnifiedPushClient(settings: settings, http: http), logger: app.logger,
            delivered: { operation, outcome in cluster?.send(Delivered(operation: operation, outcome: outcome), on: Self.delivered) }
        )
        cluster?.on(Self.delivered) { relay.heard($0.operation, $0.outcome) }
        app.run(relay)
        app.logger.info("Relaying device registrations to Unified Push", metadata: [
            "url": .string(settings.baseURL), "variants": .string(settings.variants.keys.map(\.displayName).sorted().joined(separator: ", ")),
            "task_notifications": .stringConvertible(settings.notifyTasks),
        ])
        self.relay = relay
    }

    /// A session that ends takes the push registrations made through it along, in the same transaction.
    var sessionEnding: SessionEnding? {
        relay.map { relay in
            SessionEnding(
                sqlite: { db, ids in try SQLitePushStorage.sessionsEnding(ids, db: db) },
                postgres: { [logger = relay.logger] connection, ids in
                    try await PostgresPushStorage.sessionsEnding(ids, connection: connection, logger: logger)
                },
                afterwards: { relay.wake() }
            )
        }
    }

    /// Sends task changes to devices, when the sender's credentials allow and the operator did not turn it off.
    /// `leadership`: with a remote task server every instance hears each event, and only the leader sends it.
    func notifyOfTasks(_ changes: TaskChanges, authors: TaskAuthors, leadership: ClusterLeadership?) {
        guard let relay, relay.client.settings.notifyTasks else { return }
        TaskNotifications(
            devices: relay.devices, relay: relay, authors: authors, speaksForTheUpstream: { leadership?.isLeader ?? true }, logger: relay.logger
        ).follow(changes)
    }

    var notifiesOfTasks: Bool { relay?.client.settings.notifyTasks ?? false }

    func addRoutes(to router: FoyerRouter) {
        DevicesAPIController(relay: relay).addRoutes(to: router)
    }
}
