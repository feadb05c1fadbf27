/// Accounts and the sessions signed in to them: who is asking. Revocations reach the other instances' caches.
struct SessionsFeature {
    /// Sessions revoked or pruned elsewhere: cached entries must go.
    static let ended = ClusterTopic<[String]>("sessions.ended")
    /// An account changed (a name, an address): cached sign-ins of it must be read again.
    static let accountChanged = ClusterTopic<Int64>("sessions.account_changed")

    let users: UserRepository
    let sessions: SessionRepository
    let throttle: SignInThrottle
    /// ID tokens, nonces and DPoP proofs already used.
    let spent: SpentCredentials
    /// What sessions hold open (event streams, websockets): it ends with them, on every instance.
    let holds: SessionHolds

    /// `ending`: what else goes in the transaction that ends sessions (push registrations).
    init(_ app: Foundations, ending: SessionEnding?) {
        let (cluster, holds) = (app.cluster, SessionHolds())
        self.holds = holds
        users = UserRepository(store: app.store, passwordHashCost: app.config.passwordHashCost)
        let sessions = SessionRepository(
            store: app.store, lifetime: app.config.sessionLifetime, ending: ending,
            revoked: { id in
                holds.end(sessions: [id])
                cluster?.send([id], on: Self.ended)
            },
            accountChanged: { id in cluster?.send(id, on: Self.accountChanged) }
        )
        throttle = SignInThrottle(store: app.store)
        spent = SpentCredentials(store: app.store)
        app.run(Pruning.sessions(sessions, throttle: throttle, logger: app.logger))
        app.run(Pruning.spentCredentials(spent, logger: app.logger))
        app.run(HeldSessionExpiry(holds: holds, sessions: sessions, logger: app.logger))
        cluster?.on(Self.ended) { ids in
            for id in ids { sessions.cache.forget(sessionID: id) }
            holds.end(sessions: ids)
        }
        cluster?.on(Self.accountChanged) { id in sessions.cache.forget(userID: id) }
        // Missed revocations are possible while not hearing the others: no cached session is trusted.
        cluster?.onBreak { sessions.cache.forgetAll() }
        cluster?.onGap { sessions.cache.forgetAll() }
        self.sessions = sessions
    }
}
