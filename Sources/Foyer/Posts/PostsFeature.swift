/// Posts: the pages, the JSON API, and their live updates, on every instance.
struct PostsFeature {
    /// A post written on another instance: read it back from the shared database.
    struct Changed: Codable, Sendable, Equatable {
        enum Kind: String, Codable, Sendable { case created, updated, deleted }
        let kind: Kind
        let id: Int64
    }
    static let changed = ClusterTopic<Changed>("posts.changed")

    let posts: PostRepository
    let changes: ChangeFeed<PostChange>
    let fragments: PostFragments
    let pictures: PicturesController
    /// What a post passes before it is published.
    let rules: PostingRules

    init(_ app: Foundations, rules: PostingRules, blocks: Blocks) {
        self.rules = rules
        let (cluster, changes, streams) = (app.cluster, ChangeFeed<PostChange>(), app.streams)
        self.changes = changes
        let fragments = PostFragments(views: app.views)
        self.fragments = fragments
        // Open pages hear of a write once, from the instance that made it: the journal carries it to the others.
        let posts = PostRepository(store: app.store, blocks: blocks) { change in
            changes.publish(change)
            streams.broadcast(on: .posts, author: change.author) { fragments.html(for: change, in: $0) }
            cluster?.send(Changed(change), on: Self.changed)
        }
        self.posts = posts
        pictures = PicturesController(storage: app.store.pictureStorage, generation: posts.generation)
        guard let cluster else { return }
        cluster.on(Self.changed) { changed in await Self.follow(changed, posts: posts, changes: changes) }
        cluster.onBreak { posts.generation.bump() }
        // An author renamed on another instance: kept lists and posts name them.
        cluster.on(SessionsFeature.accountChanged) { _ in posts.generation.bump() }
        cluster.onGap {
            posts.generation.bump()
            changes.missed()
        }
    }

    /// Another instance's write: cached lists let go, and open pages show the post as stored now (a later change
    /// may have come meanwhile; its own message follows).
    static func follow(_ changed: Changed, posts: PostRepository, changes: ChangeFeed<PostChange>) async {
        posts.generation.bump()
        switch changed.kind {
        case .deleted: changes.publish(.deleted(id: changed.id))
        case .created, .updated:
            guard let post = try? await posts.find(id: changed.id) else { return }
            guard post.isVisible(to: nil) else { return changes.publish(.deleted(id: changed.id)) }
            changes.publish(changed.kind == .created ? .created(post) : .updated(post))
        }
    }

    func addRoutes(to router: FoyerRouter, views: Views, streams: LiveStreams, config: FoyerConfig, metrics: FoyerMetrics) {
        PostsAPIController(posts: posts, rules: rules, metrics: metrics, requirePreconditions: config.posts.requirePreconditions).addRoutes(to: router)
        pictures.addRoutes(to: router)
        PostsController(posts: posts, views: views, streams: streams, fragments: fragments, rules: rules, metrics: metrics).addRoutes(to: router)
    }
}

extension PostsFeature.Changed {
    init(_ change: PostChange) {
        switch change {
        case .created(let post): self.init(kind: .created, id: post.id)
        case .updated(let post): self.init(kind: .updated, id: post.id)
        case .deleted(let id): self.init(kind: .deleted, id: id)
        }
    }
}
