import Foundation
import HTTPTypes
import Hummingbird

/// A write made from an older read: the post changed since (or was deleted: `current` nil).
struct PostChanged: Error {
    let current: PublishedPost?
}

extension PostRepository {
    /// How a write made from an older version than `current`'s meets what came since: merged (only the fields the
    /// write changed, to apply over `current`), or the fields both sides changed. Nil when the write names no version
    /// to merge from (it is then simply refused).
    func merge(_ changes: PostChanges, from precondition: PostPrecondition, into current: PublishedPost) async throws -> PostMerge.Outcome? {
        guard let base = precondition.base, base < current.post.version, let snapshot = try await snapshot(of: current.id, at: base) else {
            return nil
        }
        return PostMerge.judge(changes, base: snapshot, current: PostSnapshot(current.post, picture: current.picture))
    }
}

/// What a write to a post says about the version it was made from (RFC 9110 §13.1.1 `If-Match`, or `version` in
/// the body, as Rails' `lock_version` and AeroGear DataSync send it), and whether it holds.
enum PostPrecondition: Sendable, Equatable {
    /// Neither: applied to whatever the post is now, as before (counted; `--require-preconditions` answers 428).
    case none
    /// `If-Match: *`: over whatever the post is now, on purpose.
    case any
    /// `If-Match` with these entity tags (a version each, or nil for a tag that names none of ours: it never holds).
    case ifMatch([Int?])
    /// `version` in the body.
    case body(Int)

    /// A post's strong entity tag: its version. (The author's name, shown beside the post, is not part of it: a
    /// rename is not a change to the post.)
    static func etag(_ version: Int) -> String { "\"\(version)\"" }

    init(_ request: Request, bodyVersion: Int?) {
        if let header = Self.entityTags(request.headers[values: .ifMatch].joined(separator: ",")).nonEmpty {
            let tags = header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            if tags.contains("*") {
                self = .any
            } else {
                // Strong comparison: a weak tag (`W/"3"`) never matches.
                self = .ifMatch(tags.map { tag in
                    guard tag.count >= 3, tag.hasPrefix("\""), tag.hasSuffix("\"") else { return nil }
                    return Int(tag.dropFirst().dropLast())
                })
            }
        } else if let bodyVersion {
            self = .body(bodyVersion)
        } else {
            self = .none
        }
    }

    /// A header of entity tags as sent. Clients made by swift-openapi-generator percent-encode every header value
    /// (`%221%22` for `"1"`, `%2A` for `*`: apple/swift-openapi-generator#529, #857); neither `%` nor a tag holding
    /// one is valid there, so such a value is read decoded.
    static func entityTags(_ header: String) -> String {
        guard header.contains("%"), let decoded = header.removingPercentEncoding else { return header }
        return decoded
    }

    /// True when the write may go over `version`.
    func holds(at version: Int) -> Bool {
        switch self {
        case .none, .any: true
        case .ifMatch(let versions): versions.contains(version)
        case .body(let base): base == version
        }
    }

    /// The write named no version: it would have been applied over anything (counted as `unconditional`).
    var isUnconditional: Bool { self == .none }

    /// The version the write was made from, to merge it with what came since: the newest one it names.
    var base: Int? {
        switch self {
        case .none, .any: nil
        case .ifMatch(let versions): versions.compactMap { $0 }.max()
        case .body(let version): version
        }
    }

    /// What a precondition that does not hold answers: `412` for `If-Match` (RFC 9110), `409` for a body's version.
    var failureStatus: HTTPResponse.Status { if case .body = self { .conflict } else { .preconditionFailed } }
}

/// How a post write's precondition went, as `foyer_write_conflicts_total{resource="post", outcome}` counts it.
enum WriteConflictOutcome: String, Sendable, CaseIterable {
    /// The version named was not the post's, and the write changed a field changed since: nothing was written.
    case refused
    /// The version named was not the post's, but the write changed only fields nobody changed since: applied.
    case merged
    /// `If-Match: *`: written over whatever was there.
    case forced
    /// No version named: written over whatever was there.
    case unconditional
}
