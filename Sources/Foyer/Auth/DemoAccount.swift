import FoyerServer
import Logging
import NIOPosix
import ServiceLifecycle

extension FoyerConfig.DemoAccount {
    /// On an empty database, create the demo account so a newcomer can sign in at once; returns it when created.
    @discardableResult
    func createIfNoUsers(in users: UserRepository, logger: Logger) async throws -> User? {
        guard try await users.count() == 0 else { return nil }
        // Checking the password reads the common-password list: on the blocking pool, not on an event loop the
        // server is starting on (making its set took 7 ms).
        _ = try await NIOThreadPool.singleton.runIfActive { CommonPasswords.all.count }
        let password = self.password ?? String(SessionRepository.randomToken().prefix(16))
        let user: User
        do {
            user = try await users.create(email: email, password: password)
        } catch UserError.emailTaken {
            // Another instance sharing the database made it a moment ago (and seeds the posts).
            return nil
        }
        if self.password == nil {
            logger.notice("Created the demo account: sign in as \(email) with password \(password) (shown only this once)")
        } else {
            logger.notice("Created the demo account \(email) with the password from FOYER_DEMO_PASSWORD")
        }
        return user
    }
}

/// Creates the demo account and its sample posts on an empty database, once the server listens: hashing the
/// password (bcrypt, cost 12) and reading the common-password list take a core for a while, which the listener and
/// the first request want while the server starts; nobody can sign in before it listens anyway.
struct DemoSeeding: Service {
    let account: FoyerConfig.DemoAccount
    let users: UserRepository
    let posts: PostRepository
    let readiness: Readiness
    let listening: ServerListening
    let logger: Logger

    func run() async throws {
        // Stopped before the server ever listened: nothing to make.
        guard (try? await cancelWhenGracefulShutdown({ await listening.wait() })) != nil, listening.isListening else { return }
        do {
            if let demo = try await account.createIfNoUsers(in: users, logger: logger) {
                try await SamplePosts.seed(into: posts, author: demo)
            }
        } catch {
            logger.error("Could not create the demo account: \(error)")
        }
        readiness.markReady()
        // A service that returns stops the application: stay until it stops.
        try? await gracefulShutdown()
    }
}
