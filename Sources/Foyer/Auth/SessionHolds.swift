import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// What signed-in sessions hold open (live event streams, GraphQL websockets), so that a session that ends ends
/// them too, whichever way it ends: signed out, revoked here or on another instance, logged out at the identity
/// provider, or expired while a page stayed open.
final class SessionHolds: Sendable {
    /// How often held sessions are checked for expiry (idle or lifetime): a page left open keeps no request coming.
    static let expiryCheckInterval: Duration = .seconds(15)

    private struct Holder {
        let session: AuthSession
        let end: @Sendable () -> Void
    }

    private let holders = NIOLockedValueBox<[String: [UUID: Holder]]>([:])

    /// `end` runs once, on any thread, when `session` ends while held; `release` the hold when what it kept open is gone.
    func hold(_ session: AuthSession, end: @escaping @Sendable () -> Void) -> Release {
        let id = UUID()
        holders.withLockedValue { $0[session.id, default: [:]][id] = Holder(session: session, end: end) }
        return Release { [weak self] in
            self?.holders.withLockedValue { holders in
                holders[session.id]?.removeValue(forKey: id)
                if holders[session.id]?.isEmpty == true { holders.removeValue(forKey: session.id) }
            }
        }
    }

    struct Release: Sendable {
        fileprivate let release: @Sendable () -> Void
        func callAsFunction() { release() }
    }

    /// Ends what these sessions hold open.
    func end(sessions ids: [String]) {
        let ended = holders.withLockedValue { holders in ids.flatMap { holders.removeValue(forKey: $0)?.values.map(\.end) ?? [] } }
        for end in ended { end() }
    }

    /// The session as stored now, used again since it was first held.
    func renew(_ session: AuthSession) {
        holders.withLockedValue { holders in
            guard let held = holders[session.id] else { return }
            holders[session.id] = held.mapValues { Holder(session: session, end: $0.end) }
        }
    }

    /// Held sessions that may have expired by now, as they were when first held (`SessionRepository` confirms).
    func possiblyExpired(lifetime: SessionLifetime, now: Date) -> [AuthSession] {
        holders.withLockedValue { holders in
            holders.values.compactMap { $0.values.first?.session }.filter { !lifetime.isLive($0, now: now) }
        }
    }
}

/// Ends what expired sessions hold open: nothing else notices a session running out while a page just listens.
struct HeldSessionExpiry: Service {
    let holds: SessionHolds
    let sessions: SessionRepository
    let logger: Logger

    func run() async {
        await cancelWhenGracefulShutdown {
            while (try? await Task.sleep(for: SessionHolds.expiryCheckInterval)) != nil {
                await endExpired(now: Date())
            }
        }
    }

    func endExpired(now: Date) async {
        for held in holds.possiblyExpired(lifetime: sessions.lifetime, now: now) {
            do {
                // Used elsewhere since (its last_seen_at moved): still live, held on.
                if let current = try await sessions.list(userId: held.userId, now: now).first(where: { $0.id == held.id }) {
                    holds.renew(current)
                } else {
                    holds.end(sessions: [held.id])
                }
            } catch {
                logger.warning("Could not check whether a held session expired: \(error)")
            }
        }
    }
}
