/// Passkeys on accounts, signing in with them, and the association files apps need to share them and open links.
struct PasskeysFeature {
    let passkeys: Passkeys
    let association: AppAssociationController

    init(_ app: Foundations) throws {
        var settings = app.config.passkeys
        settings.publicURL = app.config.mail.publicURL
        settings.trustProxy = app.config.trustProxy
        let passkeys = Passkeys(
            storage: app.store.passkeyStorage, settings: settings, metrics: PasskeyMetrics(registry: app.metrics.registry), logger: app.logger
        )
        self.passkeys = passkeys
        association = try AppAssociationController(settings: settings)
        app.run(Pruning(what: "passkey challenges", interval: .seconds(600), logger: app.logger) {
            _ = try await passkeys.storage.deleteExpiredChallenges(before: .now)
        })
    }

    func addRoutes(to router: FoyerRouter, accounts: AccountsFeature) {
        association.addRoutes(to: router)
        let (mail, storage, outbox) = (accounts.mail.accountMail, accounts.storage, accounts.mail.sender)
        PasskeysController(passkeys: passkeys) { user, passkey in
            guard let id = user.id else { return }
            try await storage.update(userId: id, name: nil, passwordHash: nil, writes: mail.passkeyAdded(for: user, name: passkey.name), now: .now)
            outbox.nudge()
        }.addRoutes(to: router)
    }
}
