/// Accounts and the sessions signed in to them: who is asking. Revocations reach the other instances' caches.
struct SessionsFeature {
    /// Sessions revoked or pruned elsewhere: cached entries must go.
    static let ended = ClusterTopic<[String]>("sessions.ended")

    let users: UserRepository
    let sessions: SessionRepository
    let throttle: SignInThrottle

    /// `ending`: what else goes in the transaction that ends sessions (push registrations).
    init(_ app: Foundations, ending: SessionEnding?) {
        let cluster = app.cluster
        users = UserRepository(store: app.store, passwordHashCost: app.config.passwordHashCost)
        let sessions = SessionRepository(
            store: app.store, lifetime: app.config.sessionLifetime, ending: ending,
            revoked: { id in cluster?.send([id], on: Self.ended) }
        )
        throttle = SignInThrottle(store: app.store)
        app.run(SessionPruning(sessions: sessions, throttle: throttle, logger: app.logger))
        cluster?.on(Self.ended) { ids in
            for id in ids { sessions.cache.forget(sessionID: id) }
        }
        // Missed revocations are possible while not hearing the others: no cached session is trusted.
        cluster?.onBreak { sessions.cache.forgetAll() }
        cluster?.onGap { sessions.cache.forgetAll() }
        self.sessions = sessions
    }
}
