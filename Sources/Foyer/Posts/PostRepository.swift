import Foundation
import GRDB
import Hummingbird
import NIOConcurrencyHelpers

/// Posts, with their authors. Writes bump `generation`, which tells caches built on reads to let go.
public struct PostRepository: Sendable {
    let storage: any PostStorage
    let generation = Generation()
    /// Nothing of a person reaches someone they are kept apart from by a block.
    let blocks: Blocks
    /// Told of every write once it is stored (live pages follow posts through it).
    let onChange: @Sendable (PostChange) -> Void

    public init(database: any DatabaseWriter) {
        self.init(store: .sqlite(database), blocks: Blocks(store: .sqlite(database)), onChange: { _ in })
    }

    init(store: Store, blocks: Blocks, onChange: @escaping @Sendable (PostChange) -> Void) {
        self.storage = store.postStorage
        self.blocks = blocks
        self.onChange = onChange
    }

    /// A counter of writes: a cache entry made at generation N is stale once it is not N any more.
    final class Generation: Sendable {
        private let value = NIOLockedValueBox(0)
        var current: Int { value.withLockedValue { $0 } }
        func bump() { value.withLockedValue { $0 += 1 } }
    }

    public struct Page: Sendable {
        public let posts: [PublishedPost]
        public let total: Int
        public let number: Int
        public let perPage: Int

        var lastPage: Int { max(1, (total + perPage - 1) / perPage) }
        var hasNext: Bool { number < lastPage }
        var hasPrevious: Bool { number > 1 }
    }

    /// Newest first, without the posts of `excluded` authors.
    func page(_ paging: Paging, excluding excluded: Set<Int64> = []) async throws -> Page {
        let (posts, total) = try await storage.page(limit: paging.perPage, offset: paging.offset, excluding: excluded)
        return Page(posts: posts, total: total, number: paging.page, perPage: paging.perPage)
    }

    public func find(id: Int64) async throws -> PublishedPost? {
        try await storage.find(id: id)
    }

    /// The post's fields at an earlier version: what a write made from it is compared with.
    func snapshot(of id: Int64, at version: Int) async throws -> PostSnapshot? {
        try await storage.snapshot(of: id, at: version)
    }

    /// `held`: kept for its author and moderators until one approves it (a watched word).
    func create(_ changes: PostChanges, author: User, held: Bool = false) async throws -> PublishedPost {
        let errors = changes.validationErrors(creating: true)
        guard errors.isEmpty, let authorId = author.id else { throw ValidationFailed(errors: errors, status: changes.failureStatus) }
        let now = Date()
        var post = Post(id: nil, title: "", content: "", authorId: authorId, createdAt: now, updatedAt: now)
        if held { (post.hidden, post.hiddenAt) = (.held, now) }
        changes.apply(to: &post)
        let picture: NewPicture? = if case .replace(let new)? = changes.pictureChange(hasPicture: false) { new } else { nil }
        let saved = try await storage.insert(post, picture: picture)
        generation.bump()
        let published = PublishedPost(post: saved, author: author.publicView, picture: picture?.picture)
        if !held { onChange(.created(published)) }
        return published
    }

    /// `held`: the change has a watched word, and the post waits for a moderator unless something hides it already.
    /// Written only over the version `published` was read at: `PostChanged` (with the post as it is now) when another
    /// change came first.
    func update(_ published: PublishedPost, with changes: PostChanges, held: Bool = false) async throws -> PublishedPost {
        try changes.validate(creating: false)
        var post = published.post
        changes.apply(to: &post)
        post.updatedAt = Date()
        if held, post.hidden == nil { (post.hidden, post.hiddenAt) = (.held, post.updatedAt) }
        let pictureChange = changes.pictureChange(hasPicture: published.picture != nil)
        var picture = published.picture
        switch pictureChange {
        case .replace(let new)?: picture = new.picture
        case .remove?: picture = nil
        case .describe(let alt)?: picture?.alt = alt
        case nil: break
        }
        guard try await storage.update(post, picture: pictureChange, snapshot: PostSnapshot(post, picture: picture)) else {
            throw PostChanged(current: try await storage.find(id: published.id))
        }
        post.version += 1
        generation.bump()
        let updated = PublishedPost(post: post, author: published.author, picture: picture, authorSuspended: published.authorSuspended)
        // A post only its author and moderators see stays off everyone's open pages.
        onChange(updated.isVisible(to: nil) ? .updated(updated) : .deleted(id: updated.id))
        return updated
    }

    /// `version`: only while the post is at it, else `PostChanged`; nil: whatever it is at.
    func delete(id: Int64, version: Int? = nil) async throws {
        let deleted = try await storage.delete(id: id, version: version)
        if !deleted, version != nil, let current = try await storage.find(id: id) { throw PostChanged(current: current) }
        generation.bump()
        if deleted { onChange(.deleted(id: id)) }
    }

    /// Posts whose author's account was deleted (their rows went with it), or that a moderator took from view
    /// (removed, or all of a suspended author's): open pages and cached lists drop them.
    func withdrawn(postIDs: [Int64]) {
        generation.bump()
        for id in postIDs { onChange(.deleted(id: id)) }
    }

    /// Posts a moderator let everyone see again (restored, approved, their author's suspension lifted): open pages
    /// show them as they are stored now.
    func reinstated(postIDs: [Int64]) async throws {
        generation.bump()
        for id in postIDs {
            guard let post = try await find(id: id), post.isVisible(to: nil) else { continue }
            onChange(.created(post))
        }
    }

    /// The post named by the route's `{id}`: 404 for an unknown or malformed id, and for one the caller may not see;
    /// 410 for one its author deleted (a write from a form or a queue opened before then is told why it failed).
    func find(in context: some CallerContext) async throws -> PublishedPost {
        let raw = try context.parameters.require("id")
        let notFound = AppError(.notFound, title: Phrase("posts.not_found.title"), message: Phrase("posts.not_found.message", ["id": raw]))
        guard let id = Int64(raw) else { throw notFound }
        guard let published = try await find(id: id) else {
            throw try await storage.wasDeleted(id: id) ? Self.gone(id) : notFound
        }
        guard published.isVisible(to: context.caller), try await !blocks.keptApart(from: context.caller).contains(published.post.authorId) else {
            throw notFound
        }
        return published
    }

    static func gone(_ id: Int64) -> AppError {
        AppError(.gone, title: Phrase("posts.new.deleted_heading"), message: Phrase("posts.gone.message", ["id": String(id)]))
    }

    /// The post named by the route's `{id}`, when the signed-in user wrote it: 403 for anyone else.
    func findOwn(in context: SignedInContext) async throws -> PublishedPost {
        let published = try await find(in: context)
        guard published.author.id == context.identity.userId else {
            throw AppError(.forbidden, title: Phrase("posts.not_yours.title"), message: Phrase("posts.not_yours.message"))
        }
        return published
    }

    public func count() async throws -> Int {
        try await storage.count()
    }
}
