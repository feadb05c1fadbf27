import Logging
import ServiceLifecycle

/// Deletes what can no longer be used: at start, then every `interval` until shutdown, then `atShutdown` once. A
/// failed turn is logged and the next one tries again.
struct Pruning: Service {
    /// What is pruned, for the log: "sessions", "spent credentials".
    let what: String
    let interval: Duration
    let logger: Logger
    let prune: @Sendable () async throws -> Void
    var atShutdown: (@Sendable () async throws -> Void)?

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await prune()
                } catch {
                    logger.error("pruning \(what) failed: \(error)")
                }
                try? await Task.sleep(for: interval)
            }
        }
        guard let atShutdown else { return }
        do {
            try await atShutdown()
        } catch {
            logger.error("storing \(what) at shutdown failed: \(error)")
        }
    }
}
