import Logging

extension FoyerConfig.DemoAccount {
    /// On an empty database, create the demo account so a newcomer can sign in at once; returns it when created.
    @discardableResult
    func createIfNoUsers(in users: UserRepository, logger: Logger) async throws -> User? {
        guard try await users.count() == 0 else { return nil }
        let password = self.password ?? String(SessionStore.randomToken().prefix(16))
        let user = try await users.create(email: email, password: password)
        if self.password == nil {
            logger.notice("Created the demo account: sign in as \(email) with password \(password) (shown only this once)")
        } else {
            logger.notice("Created the demo account \(email) with the password from FOYER_DEMO_PASSWORD")
        }
        return user
    }
}
