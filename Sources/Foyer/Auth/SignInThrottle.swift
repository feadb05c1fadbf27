import Foundation
import GRDB
import Hummingbird

/// Slows password guessing: after 5 failed sign-ins for one login, or 20 from one client IP, within 15 minutes,
/// every sign-in for that login (or from that IP) is refused until the window has passed, right password or not.
/// Counted by the login as typed (normalized), whether or not an account has it, so a refusal says nothing about
/// which accounts exist. The counts live in the database: a restart does not reset them.
struct SignInThrottle: Sendable {
    static let window: TimeInterval = 15 * 60
    static let perLogin = 5
    static let perClient = 20

    let storage: any SignInFailureStorage

    init(store: Store) {
        storage = store.signInFailureStorage
    }

    init(database: any DatabaseWriter) {
        self.init(store: .sqlite(database))
    }

    /// Thrown instead of checking a password; `retryAfter` in whole seconds, for the `Retry-After` header.
    struct Throttled: Error {
        let retryAfter: Int
        static let failedSignIns = "failed sign-ins"
        /// What there were too many of.
        var reason = failedSignIns
        var message: String {
            "Too many \(reason). Try again in \(Self.describe(seconds: retryAfter))."
        }

        /// The message in a reader's language, its count in the form the language gives it.
        var phrase: Phrase {
            let minutes = (retryAfter + 59) / 60
            return switch (reason == Self.failedSignIns, retryAfter < 90) {
            case (true, true): Phrase("throttle.sign_ins_seconds", count: retryAfter)
            case (true, false): Phrase("throttle.sign_ins_minutes", count: minutes)
            case (false, true): Phrase("throttle.requests_seconds", count: retryAfter)
            case (false, false): Phrase("throttle.requests_minutes", count: minutes)
            }
        }

        static func describe(seconds: Int) -> String {
            seconds < 90 ? "\(seconds) seconds" : "\((seconds + 59) / 60) minutes"
        }
    }

    /// `login` nil: counted by client only (an ID token names no login to guess at, and a shared key would let
    /// anyone lock every app of a provider out).
    private static func keys(login: String?, clientIP: String?) -> [(key: String, limit: Int)] {
        var keys = login.map { [("login:" + User.normalize(email: $0), perLogin)] } ?? []
        if let clientIP { keys.append(("client:" + clientIP, perClient)) }
        return keys
    }

    /// The rows an attempt under way counts with, until it turns out right (then they go).
    struct Attempt {
        fileprivate let rowIDs: [Int64]
    }

    /// Checks the counts and, in the same transaction, counts this attempt as a failure before any password is
    /// checked: fifty guesses sent at once then meet the limit like fifty in a row, not after all were hashed.
    /// Throws `Throttled` when the login or the client is over its limit.
    func begin(login: String?, clientIP: String?, now: Date = Date()) async throws -> Attempt {
        Attempt(rowIDs: try await count(Self.keys(login: login, clientIP: clientIP), now: now, reason: Throttled.failedSignIns))
    }

    /// A request that mails someone or makes something (a password reset, a sign-up): every one counts against the
    /// client, right or wrong, under a key of its own (`action`), so it neither spends nor is spent by sign-in
    /// failures. Throws `Throttled` past `perClient` in the window.
    func countRequest(_ action: String, clientIP: String?, now: Date = Date()) async throws {
        guard let clientIP else { return }
        _ = try await count([("\(action):" + clientIP, Self.perClient)], now: now, reason: "requests from here")
    }

    /// Counts one more under each key, in one transaction with the check; the rows counted, or `Throttled` when a
    /// key is over its limit.
    private func count(_ keys: [(key: String, limit: Int)], now: Date, reason: String) async throws -> [Int64] {
        let since = now.addingTimeInterval(-Self.window)
        let (reopensAt, rowIDs) = try await storage.countAttempt(keys: keys, since: since, now: now, window: Self.window)
        if let reopensAt {
            throw Throttled(retryAfter: max(1, Int(reopensAt.timeIntervalSince(now).rounded(.up))), reason: reason)
        }
        return rowIDs
    }

    /// The attempt could not be judged (the realm did not answer): it does not count.
    func abandon(_ attempt: Attempt) async throws {
        try await storage.delete(rowIDs: attempt.rowIDs, alsoKey: nil)
    }

    /// Drops failures that no longer count (`begin` does too; this catches the quiet hours).
    func prune(now: Date = Date()) async throws {
        try await storage.deleteBefore(now.addingTimeInterval(-Self.window))
    }

    /// The account's owner got in: this attempt and their earlier typos no longer count. (The client's earlier
    /// failures stay: one right password must not buy an attacker twenty more guesses at other accounts.)
    func succeeded(_ attempt: Attempt, login: String?) async throws {
        let key = login.map { "login:" + User.normalize(email: $0) }
        try await storage.delete(rowIDs: attempt.rowIDs, alsoKey: key)
    }
}

extension Response {
    /// This answer (a `429`) says when to try again.
    func retrying(after throttled: SignInThrottle.Throttled) -> Response {
        var response = self
        response.headers[.retryAfter] = String(throttled.retryAfter)
        return response
    }
}
