import Foundation
import Logging

extension Pruning {
    /// Expired and revoked sessions, and sign-in failures past the throttling window: at start, then every hour.
    static func sessions(_ sessions: SessionRepository, throttle: SignInThrottle, logger: Logger) -> Pruning {
        Pruning(what: "sessions", interval: .seconds(3600), logger: logger) {
            let pruned = try await sessions.prune()
            try await throttle.prune()
            if pruned > 0 { logger.info("pruned \(pruned) expired or revoked sessions") }
        }
    }
}
