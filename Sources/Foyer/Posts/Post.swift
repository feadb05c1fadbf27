import Foundation
import GRDB
import HTTPTypes

/// A post: Foyer's own data. `content` is plain text; pages render it as escaped paragraphs.
public struct Post: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "posts"
    public static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase
    static let maximumTitleLength = 200
    static let maximumContentLength = 100_000

    public var id: Int64?
    public var title: String
    public var content: String
    public var authorId: Int64
    public var createdAt: Date
    public var updatedAt: Date
    /// Kept from everyone but its author and moderators; nil: shown to all.
    var hidden: Hidden?
    var hiddenAt: Date?
    /// Raised by one with every change its author makes (not by a moderator's, nor a picture's variants): what an
    /// `ETag` and `If-Match` name, so that an edit made from an older read never overwrites a newer one.
    var version = 1

    enum Hidden: String, Codable, Sendable {
        /// By a moderator: restorable for 30 days, then deleted.
        case removed
        /// Until a moderator approves it (a watched word).
        case held
    }

    public init(id: Int64? = nil, title: String, content: String, authorId: Int64, createdAt: Date, updatedAt: Date) {
        (self.id, self.title, self.content, self.authorId, self.createdAt, self.updatedAt) = (id, title, content, authorId, createdAt, updatedAt)
    }

    /// Read by column name, not through Decodable: a point read is mostly this, and GRDB's Codable decoding
    /// (a decoder per row, each column name converted from snake_case on every read) was a fifth of it.
    public init(row: Row) throws {
        id = row["id"]
        title = row["title"]
        content = row["content"]
        authorId = row["author_id"]
        createdAt = row["created_at"]
        updatedAt = row["updated_at"]
        hidden = (row["hidden"] as String?).flatMap(Hidden.init(rawValue:))
        hiddenAt = row["hidden_at"]
        version = row["version"]
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        id = inserted.rowID
    }
}

/// A post as pages and the API show it: with its author's public face.
public struct PublishedPost: Sendable {
    public let post: Post
    public let author: User.Public
    var picture: Picture? = nil
    /// A moderator suspended the author: nobody else sees their posts.
    var authorSuspended = false

    var id: Int64 { post.id ?? 0 }

    /// Whether `caller` may read it: anyone, unless it is hidden or its author suspended; then its author and moderators.
    func isVisible(to caller: Identity?) -> Bool {
        if post.hidden == nil && !authorSuspended { return true }
        guard let caller else { return false }
        return caller.userId == post.authorId || caller.user.moderates
    }
}

/// What a form or a JSON body asks to set. A nil field is left as it is (PATCH semantics).
struct PostChanges: Sendable {
    var title: String?
    var content: String?
    /// A new picture, or none any more (`.remove`); nil leaves it as it is.
    var picture: PictureChange?
    /// The picture's alt text: with a new picture, or alone for the one the post has.
    var alt: String?
    /// Why the picture sent was not taken: the write fails validation with it (413 for one too large).
    var pictureRefused: PictureRefused?
    /// The version the change was made from (`version` in a JSON body, or the edit form's hidden field): a
    /// precondition like `If-Match`.
    var baseVersion: Int?

    init(title: String? = nil, content: String? = nil, picture: PictureChange? = nil, alt: String? = nil) {
        (self.title, self.content, self.picture, self.alt) = (title, content, picture, alt)
    }

    /// What to do to the post's picture, alt text included.
    func pictureChange(hasPicture: Bool) -> PictureChange? {
        switch picture {
        case .replace(var new)?:
            if let alt { new.picture.alt = alt }
            return .replace(new)
        case .remove?: return .remove
        case .describe?, nil:
            guard let alt, hasPicture else { return nil }
            return .describe(alt: alt)
        }
    }

    /// Field → messages, Rails-style (`{"title": [Phrase("errors.blank")]}`); empty when valid.
    /// Lengths count Unicode code points, as JSON Schema's maxLength and most clients do (not Swift's graphemes).
    func validationErrors(creating: Bool) -> [String: [Phrase]] {
        var errors: [String: [Phrase]] = [:]
        if let title {
            if title.isBlank { errors["title", default: []].append(Phrase("errors.blank")) }
            if title.unicodeScalars.count > Post.maximumTitleLength {
                errors["title", default: []].append(Phrase("errors.too_long", count: Post.maximumTitleLength))
            }
        } else if creating {
            errors["title", default: []].append(Phrase("errors.blank"))
        }
        if let content, content.unicodeScalars.count > Post.maximumContentLength {
            errors["content", default: []].append(Phrase("errors.too_long", count: Post.maximumContentLength))
        }
        if let pictureRefused { errors["picture", default: []].append(Phrase(verbatim: pictureRefused.message)) }
        if let alt, alt.unicodeScalars.count > PictureLimits.maximumAltLength {
            errors["alt", default: []].append(Phrase("errors.too_long", count: PictureLimits.maximumAltLength))
        }
        return errors
    }

    /// The status of a write these changes fail: 413 when the picture was too large, else 422.
    var failureStatus: HTTPResponse.Status { pictureRefused?.status ?? .unprocessableContent }

    /// Throws `ValidationFailed` (422, or 413 for a picture too large) when the changes are not valid.
    func validate(creating: Bool) throws {
        let errors = validationErrors(creating: creating)
        guard errors.isEmpty else { throw ValidationFailed(errors: errors, status: failureStatus) }
    }

    func apply(to post: inout Post) {
        if let title { post.title = title }
        if let content { post.content = content }
    }
}
