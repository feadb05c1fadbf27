import Foundation
import HTTPTypes

/// What a post passes before anyone else sees it: the terms accepted, a new account's pace, and the operator's
/// watched words. A post with a `review` word is kept for its author and moderators until one approves it.
struct PostingRules: Sendable {
    let terms: Terms
    let watched: WatchedWords
    let storage: any PostStorage
    let reports: any ReportStorage
    let holdMails: ReportMails

    /// An account younger than this writes at most `newAccountPosts` posts an hour, unless an operator vouched for it.
    static let newAccountAge: TimeInterval = 24 * 3600
    static let newAccountPosts = 5

    enum Verdict: Sendable, Equatable {
        case publish
        /// Held for a moderator, for this word.
        case hold(String)
    }

    /// Before a post is written or changed: throws `TermsNotAccepted`, `PostingTooFast` or `ValidationFailed` (a
    /// blocked word, naming its field).
    func screen(_ changes: PostChanges, by identity: Identity, creating: Bool, now: Date = Date()) async throws -> Verdict {
        try terms.requireAccepted(by: identity)
        let user = identity.user
        if creating, user.vouchedAt == nil, now.timeIntervalSince(user.createdAt) < Self.newAccountAge {
            let recent = try await storage.creationTimes(by: identity.userId, since: now.addingTimeInterval(-3600))
            if recent.count >= Self.newAccountPosts, let oldest = recent.min() {
                throw PostingTooFast(retryAfter: oldest.addingTimeInterval(3600))
            }
        }
        var held: String?
        for (field, text) in [("title", changes.title), ("content", changes.content), ("alt", changes.alt)] {
            guard let text, let (kind, word) = watched.match(text) else { continue }
            switch kind {
            case .block: throw ValidationFailed(errors: [field: [Phrase("posting.errors.blocked_word", ["word": word])]])
            case .review: held = held ?? word
            }
        }
        return held.map(Verdict.hold) ?? .publish
    }

    /// A new post, screened and written: published, or held for a moderator (`held`) when a watched word asks it.
    func create(_ changes: PostChanges, by identity: Identity, in posts: PostRepository) async throws -> (post: PublishedPost, held: Bool) {
        let verdict = try await screen(changes, by: identity, creating: true)
        let created = try await posts.create(changes, author: identity.user, held: verdict != .publish)
        guard case .hold(let word) = verdict else { return (created, false) }
        try await held(created, for: word)
        return (created, true)
    }

    /// A change to a post, screened and written; `held`: a watched word took a shown post out of view until a
    /// moderator approves it (a post held already stays held, and waits in the queue once).
    func update(
        _ published: PublishedPost, with changes: PostChanges, by identity: Identity, in posts: PostRepository
    ) async throws -> (post: PublishedPost, held: Bool) {
        let verdict = try await screen(changes, by: identity, creating: false)
        let updated = try await posts.update(published, with: changes, held: verdict != .publish)
        guard case .hold(let word) = verdict, published.post.hidden == nil else { return (updated, false) }
        try await held(updated, for: word)
        return (updated, true)
    }

    /// A post held for `word`: it waits in the moderators' queue as a report of no one's, and they are mailed.
    private func held(_ post: PublishedPost, for word: String) async throws {
        _ = try await reports.hold(post: post, word: word, now: Date(), mails: holdMails)
    }
}

/// A new account past its posts for the hour: `429` with `Retry-After`.
struct PostingTooFast: Error {
    let retryAfter: Date
    static let message = Phrase("posting.too_fast", count: PostingRules.newAccountPosts)
}
