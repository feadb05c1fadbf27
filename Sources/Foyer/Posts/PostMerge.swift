import Foundation

/// A post's fields at one version, as `post_versions` keeps them: what a write made from that version changed, and
/// what was changed since, are told apart by comparing with it.
struct PostSnapshot: Sendable, Equatable {
    let title: String
    let content: String
    let pictureId: String?
    let alt: String?

    init(title: String, content: String, pictureId: String?, alt: String?) {
        (self.title, self.content, self.pictureId, self.alt) = (title, content, pictureId, alt)
    }

    init(_ post: Post, picture: Picture?) {
        self.init(title: post.title, content: post.content, pictureId: picture?.id, alt: picture?.alt)
    }
}

/// The SQL both stores run for versions.
enum PostVersionRows {
    /// Versions kept per post, the newest: a write made from an older one cannot be merged and is a conflict, as
    /// any write from a version nobody kept would be.
    static let kept = 50

    /// Every post's current version, for posts written before versions were kept.
    static let backfill = """
        INSERT INTO post_versions (post_id, version, title, content, picture_id, picture_alt, created_at)
        SELECT posts.id, posts.version, posts.title, posts.content, pictures.id, pictures.alt, posts.updated_at
        FROM posts LEFT JOIN pictures ON pictures.post_id = posts.id
        """
}

/// AeroGear DataSync's rule, field by field: a write made from version n goes over a newer version when the fields
/// it changes (against n) are not among those changed since n. Only a field changed on both sides is a conflict.
enum PostMerge {
    enum Outcome: Equatable {
        /// Only the fields this write changed, to apply over the post as it is now.
        case merged(changedFields: [String])
        /// Fields both sides changed.
        case conflict([String])
    }

    static func fields(changedBy changes: PostChanges, since base: PostSnapshot) -> [String] {
        var fields: [String] = []
        if let title = changes.title, title != base.title { fields.append("title") }
        if let content = changes.content, content != base.content { fields.append("content") }
        if changes.picture != nil { fields.append("picture") }
        if let alt = changes.alt, alt != (base.alt ?? ""), base.pictureId != nil || changes.picture != nil { fields.append("alt") }
        return fields
    }

    static func fields(changedFrom base: PostSnapshot, to current: PostSnapshot) -> [String] {
        var fields: [String] = []
        if current.title != base.title { fields.append("title") }
        if current.content != base.content { fields.append("content") }
        if current.pictureId != base.pictureId { fields.append("picture") }
        if current.pictureId == base.pictureId, current.alt != base.alt { fields.append("alt") }
        return fields
    }

    static func judge(_ changes: PostChanges, base: PostSnapshot, current: PostSnapshot) -> Outcome {
        let mine = fields(changedBy: changes, since: base)
        let theirs = Set(fields(changedFrom: base, to: current))
        let both = mine.filter { theirs.contains($0) || ($0 == "alt" && theirs.contains("picture")) }
        return both.isEmpty ? .merged(changedFields: mine) : .conflict(both)
    }

    /// `changes` with only `fields` left: what the write changed, nothing it merely sent back as it was.
    static func restricted(_ changes: PostChanges, to fields: [String]) -> PostChanges {
        var kept = changes
        if !fields.contains("title") { kept.title = nil }
        if !fields.contains("content") { kept.content = nil }
        if !fields.contains("picture") { kept.picture = nil }
        if !fields.contains("alt") { kept.alt = nil }
        return kept
    }
}
