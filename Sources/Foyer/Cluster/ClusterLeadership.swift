import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// Which one of the instances sharing a PostgreSQL database acts for all on what every instance hears alike (a
/// remote task server's events, which each instance's own subscription brings): a session-level advisory lock
/// held on a connection of its own. The lock goes with that connection, so when its instance dies another takes
/// over within `retry`.
final class ClusterLeadership: Service, Sendable {
    static let retry: Duration = .seconds(3)
    /// The lock's two keys: this constant and the hash of the schema (advisory locks belong to the whole
    /// database; Foyers whose tables are in other schemas of it, the test suite's stores, must not share a leader).
    private static let lockKey: Int32 = 0x666f_796c

    private let store: PostgresStore
    private let logger: Logger
    private let leading = NIOLockedValueBox(false)
    private let onLeading = NIOLockedValueBox<[@Sendable () -> Void]>([])

    init(store: PostgresStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Exactly one instance's says yes while they all reach the database.
    var isLeader: Bool { leading.withLockedValue { $0 } }

    /// `handler` runs each time this instance takes the lead: what happened between the last leader's going and now
    /// was acted on by no one.
    func whenLeading(_ handler: @escaping @Sendable () -> Void) { onLeading.withLockedValue { $0.append(handler) } }

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await self.store.client.withConnection { connection in
                        defer { self.leading.withLockedValue { $0 = false } }
                        do {
                            try await self.lead(on: connection)
                        } catch {
                            await self.stepDown(connection)
                            throw error
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    self.logger.debug("Leadership connection ended: \(error)")
                }
                try? await Task.sleep(for: Self.retry)
            }
        }
    }

    /// Tries for the lock until it has it, then checks every `retry` that its connection still holds it; throws
    /// when the connection ends (or the task is cancelled).
    private func lead(on connection: PostgresConnection) async throws {
        while !Task.isCancelled {
            if isLeader {
                _ = try await connection.query("SELECT 1", logger: logger).collect()
            } else {
                let won = try await connection.query(
                    "SELECT pg_try_advisory_lock(\(Self.lockKey), hashtext(current_schema()))", logger: logger
                ).collect()
                if try won.first?.decode(Bool.self) == true {
                    leading.withLockedValue { $0 = true }
                    logger.info("This instance now acts for all on the remote task server's events")
                    for handler in onLeading.withLockedValue({ $0 }) { handler() }
                }
            }
            try await Task.sleep(for: Self.retry)
        }
        throw CancellationError()
    }

    /// The connection goes back to the pool: it must not keep the lead with it. (A connection that died took the
    /// lock along already.) This instance stops acting as leader at once; the unlock is not cancelled with the
    /// caller, or a shutting-down instance would keep the lock, but it is never waited on for more than a second
    /// (a task group would wait for it at its end, however long a closing pool takes to answer).
    private func stepDown(_ connection: PostgresConnection) async {
        let wasLeading = leading.withLockedValue { leading in
            defer { leading = false }
            return leading
        }
        guard wasLeading, !connection.isClosed else { return }
        let logger = logger
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumed = NIOLockedValueBox(false)
            let resume: @Sendable () -> Void = {
                if resumed.withLockedValue({ resumed in defer { resumed = true }; return !resumed }) { continuation.resume() }
            }
            Task.detached {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey), hashtext(current_schema()))", logger: logger).collect()
                resume()
            }
            Task.detached {
                try? await Task.sleep(for: .seconds(1))
                resume()
            }
        }
    }
}
