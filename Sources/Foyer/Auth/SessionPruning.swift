import Foundation
import Logging
import ServiceLifecycle

/// Deletes what can no longer be used (expired and revoked sessions, sign-in failures past the throttling window):
/// at start, then every hour.
struct SessionPruning: Service {
    static let interval: Duration = .seconds(3600)
    let sessions: SessionRepository
    let throttle: SignInThrottle
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let pruned = try await sessions.prune()
                    try await throttle.prune()
                    if pruned > 0 { logger.info("pruned \(pruned) expired or revoked sessions") }
                } catch {
                    logger.error("pruning sessions failed: \(error)")
                }
                try? await Task.sleep(for: Self.interval)
            }
        }
    }
}
