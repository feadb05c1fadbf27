import Foundation
import NIOConcurrencyHelpers

/// Live sessions by presented token, so an authenticated request costs a dictionary lookup instead of a
/// SHA-256 and two queries. (Keyed by the token itself: it is in this process's memory on every request
/// anyway; what must never hold usable tokens is the database, which stores only their hashes.)
/// Entries live at most `lifetime` (then the database is asked again, and last_seen_at moves); a
/// revocation removes its entry at once, so a revoked token stops working on the next request.
/// Instances sharing a PostgreSQL database tell each other of revocations (ClusterSignals), and drop every entry
/// when they may have missed some.
final class SessionCache: Sendable {
    static let lifetime: TimeInterval = 60
    static let capacity = 10_000

    private struct Entry {
        let found: SessionRepository.Found
        let loadedAt: Date
    }

    private let entries = NIOLockedValueBox([String: Entry]())

    func lookup(token: String, now: Date) -> SessionRepository.Found? {
        entries.withLockedValue { entries in
            guard let entry = entries[token], now.timeIntervalSince(entry.loadedAt) < Self.lifetime else { return nil }
            return entry.found
        }
    }

    func store(_ found: SessionRepository.Found, token: String, now: Date) {
        entries.withLockedValue { entries in
            // Crude but bounded: a full cache starts over rather than tracking recency on every hit.
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            entries[token] = Entry(found: found, loadedAt: now)
        }
    }

    func forgetAll() {
        entries.withLockedValue { $0.removeAll() }
    }

    /// Every entry of the user's sessions: the account changed (its name, its address) and must be read again.
    func forget(userID: Int64) {
        entries.withLockedValue { entries in
            for key in entries.compactMap({ $0.value.found.user.id == userID ? $0.key : nil }) {
                entries.removeValue(forKey: key)
            }
        }
    }

    /// Every entry of the session: a bound session has two tokens, the app's and its WebView's cookie's.
    func forget(sessionID: String) {
        entries.withLockedValue { entries in
            for key in entries.compactMap({ $0.value.found.session.id == sessionID ? $0.key : nil }) {
                entries.removeValue(forKey: key)
            }
        }
    }
}
