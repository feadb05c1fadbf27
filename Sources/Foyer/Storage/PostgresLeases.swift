import Foundation
import PostgresNIO

/// Work that one instance at a time may do, such as a Keycloak refresh or a pass over the push outbox, held
/// without holding a connection: a row in `foyer_leases` names its holder and when it lapses. An advisory lock
/// would pin a pooled connection (and the statement deadline) for as long as the work takes: a slow Keycloak
/// looked like PostgreSQL being away, and a burst of refreshes for many sessions took every connection and then
/// waited for one of their own.
extension PostgresStore {
    /// How long a lease outlives a holder that stopped renewing it (an instance that died mid-work).
    static let leaseTerm: Duration = .seconds(15)
    /// How often a waiting instance asks again.
    static let leasePoll: Duration = .milliseconds(50)

    /// Runs `body` holding the lease `name`, renewed every third of `term` while it runs and given up when it
    /// ends. Nil, without running `body`, when another holder keeps it past `wait` (nil: not waiting at all).
    func withLease<Value: Sendable>(
        _ name: String, term: Duration = leaseTerm, waitingUpTo wait: Duration?,
        _ body: @escaping @Sendable () async throws -> Value
    ) async throws -> Value? {
        let holder = UUID().uuidString
        let giveUpAt = wait.map { ContinuousClock.now + $0 }
        while try await !claim(name, holder: holder, term: term) {
            guard let giveUpAt, ContinuousClock.now < giveUpAt else { return nil }
            try await Task.sleep(for: Self.leasePoll)
        }
        defer {
            // Also when the caller was cancelled; if the database is away the lease lapses by itself.
            Task { try? await self.query("DELETE FROM foyer_leases WHERE name = \(name) AND holder = \(holder)") }
        }
        return try await withThrowingTaskGroup(of: Value?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                while true {
                    try await Task.sleep(for: term / 3)
                    _ = try? await self.query(
                        "UPDATE foyer_leases SET lapses_at = now() + make_interval(secs => \(term.seconds)) WHERE name = \(name) AND holder = \(holder)"
                    )
                }
            }
            defer { group.cancelAll() }
            // The renewing task ends only when cancelled: the first to finish is the body.
            return try await group.next() ?? nil
        }
    }

    /// Takes the lease when nobody holds it or its holder let it lapse; the database's clock decides, so the
    /// instances' clocks need not agree.
    private func claim(_ name: String, holder: String, term: Duration) async throws -> Bool {
        try await !query("""
            INSERT INTO foyer_leases (name, holder, lapses_at) VALUES (\(name), \(holder), now() + make_interval(secs => \(term.seconds)))
            ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, lapses_at = EXCLUDED.lapses_at
            WHERE foyer_leases.lapses_at < now()
            RETURNING holder
            """).isEmpty
    }
}
