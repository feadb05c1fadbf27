import Foundation
import HTTPTypes
import Hummingbird

/// Post pages. Reading is public; writing needs a signed-in user, and only the author may change a post.
struct PostsController {
    let posts: PostRepository
    let views: Views
    let streams: LiveStreams
    let fragments: PostFragments
    /// What a post passes before it is published.
    let rules: PostingRules
    let metrics: FoyerMetrics
    /// Rendered list bodies by page, until the next write to posts. Nothing in them depends on who asks but
    /// whether anyone is signed in (the "New post" link), the people a block keeps the reader apart from, and the
    /// reader's clock ("3 minutes ago", in their time zone, to the minute) and language: keep it that way, or add to the
    /// key.
    let listBodies = GenerationCache<ListKey, RenderedBody>(capacity: 512)

    struct ListKey: Hashable, Sendable {
        let paging: Paging
        let signedIn: Bool
        /// Empty for most readers, who share one list; each reader with blocks gets theirs kept as well.
        let keptApart: Set<Int64>
        let timeZone: String
        let minute: Int
        let language: Int
    }

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        router.get("/posts", use: index)
        signedIn.get("/posts/new", use: new)
        signedIn.post("/posts", use: create)
        router.get("/posts/{id}", use: show)
        signedIn.get("/posts/{id}/edit", use: edit)
        signedIn.patch("/posts/{id}", use: update)
        signedIn.put("/posts/{id}", use: update)
        signedIn.delete("/posts/{id}", use: destroy)
    }

    @Sendable func index(request: Request, context: FoyerRequestContext) async throws -> Response {
        let paging = try Paging(request)
        let signedIn = context.identity != nil
        let language = views.language(for: request, context: context)
        let time = ReaderTime(request, language: language)
        let excluded = try await posts.blocks.keptApart(from: context.identity)
        let key = ListKey(
            paging: paging, signedIn: signedIn, keptApart: excluded, timeZone: time.zoneName,
            minute: Int(time.now.timeIntervalSince1970 / 60), language: language.index
        )
        let body = try await listBodies.value(for: key, generation: posts.generation.current) {
            try await RenderedBody(html: renderList(paging, signedIn: signedIn, time: time, excluding: excluded, language: language))
        }
        return views.page(body: body, title: language.text("posts.index.title"), request: request, context: context, language: language)
    }

    private func renderList(
        _ paging: Paging, signedIn: Bool, time: ReaderTime, excluding excluded: Set<Int64>, language: Language
    ) async throws -> String {
        let position = streams.position(of: .posts, in: language)
        let page = try await posts.page(paging, excluding: excluded)
        var values: [String: Any] = [
            "posts": page.posts.enumerated().map { PostRowView($1, time: time, position: $0) }, "signed_in": signedIn,
            "stream_path": streams.path(of: .posts, in: language), "stream_position": position,
            "list_id": page.number == 1 ? "posts" : "posts-page-\(page.number)",
        ]
        if page.hasPrevious { values["previous_page"] = page.number - 1 }
        if page.hasNext { values["next_page"] = page.number + 1 }
        values["page_number"] = page.number
        values["last_page"] = page.lastPage
        return views.render("posts/index", values, in: language)
    }

    @Sendable func show(request: Request, context: FoyerRequestContext) async throws -> Response {
        let language = views.language(for: request, context: context)
        let position = streams.position(of: .posts, in: language)
        let published = try await posts.find(in: context)
        return views.page(
            "posts/show",
            [
                "title": published.post.title,
                "post": PostContentView(published, time: ReaderTime(request, language: language)),
                "mine": context.identity?.userId == published.author.id,
                "can_report": context.identity.map { $0.userId != published.author.id } ?? false,
                "stream_path": streams.path(of: .posts, in: language), "stream_position": position,
            ],
            request: request, context: context
        )
    }

    @Sendable func new(request: Request, context: SignedInContext) async throws -> Response {
        try rules.terms.requireAccepted(by: context.identity)
        return form(request: request, context: context, changes: PostChanges(title: "", content: ""), id: nil, current: nil)
    }

    @Sendable func create(request: Request, context: SignedInContext) async throws -> Response {
        try rules.terms.requireAccepted(by: context.identity)
        let changes = try await Self.formChanges(request)
        do {
            let (created, held) = try await rules.create(changes, by: context.identity, in: posts)
            // A native shell opened the form as a modal: close it and reload the list below.
            return .afterSubmit(request, redirectTo: "/posts/\(created.id)", native: .refresh).flashing(held ? .postHeld : .postPublished)
        } catch let invalid as ValidationFailed {
            return form(request: request, context: context, changes: changes, id: nil, current: nil, errors: invalid, status: invalid.status)
        }
    }

    /// The form follows the posts stream from before the post is read: a save elsewhere while it is open shows there.
    @Sendable func edit(request: Request, context: SignedInContext) async throws -> Response {
        let position = streams.position(of: .posts, in: views.language(for: request, context: context))
        let published = try await posts.findOwn(in: context)
        try rules.terms.requireAccepted(by: context.identity)
        var changes = PostChanges(title: published.post.title, content: published.post.content, alt: published.picture?.alt)
        changes.baseVersion = published.post.version
        return form(request: request, context: context, changes: changes, id: published.id, current: published.picture, livePosition: position)
    }

    /// The form carries the version it was rendered at: a save from an older one is a `409` page with both
    /// versions and the form again, filled with what was typed, at the version the post is now. A post deleted
    /// meanwhile is a `410` page that still holds what was typed.
    @Sendable func update(request: Request, context: SignedInContext) async throws -> Response {
        let position = streams.position(of: .posts, in: views.language(for: request, context: context))
        let published: PublishedPost
        do {
            published = try await posts.findOwn(in: context)
        } catch let error as AppError where error.status == .gone {
            return try await deletedPage(request: request, context: context, changes: Self.formChanges(request), error: error)
        }
        try rules.terms.requireAccepted(by: context.identity)
        let changes = try await Self.formChanges(request)
        let precondition = PostPrecondition(request, bodyVersion: changes.baseVersion)
        var write = changes
        var merged = false
        do {
            try changes.validate(creating: false)
        } catch let invalid as ValidationFailed {
            // The form's own mistakes first, whatever version it was rendered at.
            return form(
                request: request, context: context, changes: changes, id: published.id, current: published.picture, errors: invalid,
                status: invalid.status, livePosition: position
            )
        }
        if !precondition.holds(at: published.post.version) {
            // Saved meanwhile elsewhere: this form's changes go over it when they touch other fields.
            guard case .merged(let fields)? = try await posts.merge(changes, from: precondition, into: published) else {
                return conflictPage(request: request, context: context, current: published, yours: changes, livePosition: position)
            }
            (write, merged) = (PostMerge.restricted(changes, to: fields), true)
        }
        do {
            let held = try await rules.update(published, with: write, by: context.identity, in: posts).held
            if merged { metrics.writeConflict(.merged) }
            let flash: Flash = held ? .postHeld : merged ? .postMerged : .postSaved
            return .afterSubmit(request, redirectTo: "/posts/\(published.id)", native: .refresh).flashing(flash)
        } catch let invalid as ValidationFailed {
            return form(
                request: request, context: context, changes: changes, id: published.id, current: published.picture, errors: invalid,
                status: invalid.status, livePosition: position
            )
        } catch let changed as PostChanged {
            guard let current = changed.current else {
                return deletedPage(request: request, context: context, changes: changes, error: PostRepository.gone(published.id))
            }
            // Read after the position: the stream tells the form of anything saved after this version.
            return conflictPage(request: request, context: context, current: current, yours: changes, livePosition: position)
        }
    }

    private func conflictPage(
        request: Request, context: SignedInContext, current: PublishedPost, yours changes: PostChanges, livePosition: String
    ) -> Response {
        metrics.writeConflict(.refused)
        var retry = changes
        retry.baseVersion = current.post.version
        let theirs = current.post
        // A picture's description, when there is a picture and it has one.
        let hasPicture = current.picture != nil || { if case .replace? = changes.picture { true } else { false } }()
        let language = views.language(for: request, context: context)
        func described(_ alt: String?) -> String? {
            hasPicture ? alt.flatMap { $0.isBlank ? nil : language.text("conflict.post.picture", ["alt": $0]) } : nil
        }
        let conflict = ConflictView(
            record: .post, savedBy: current.author.name, savedAt: views.readerTime(request, context: context).view(of: theirs.updatedAt),
            theirs: .init(title: theirs.title, bodyHTML: PostText.html(theirs.content), note: described(current.picture?.alt)),
            yours: .init(
                title: changes.title ?? theirs.title, bodyHTML: PostText.html(changes.content ?? theirs.content),
                note: described(changes.alt ?? current.picture?.alt)
            )
        )
        return form(
            request: request, context: context, changes: retry, id: current.id, current: current.picture, status: .conflict,
            page: .conflict(conflict), livePosition: livePosition
        )
    }

    /// `410`: the post went while its form was open (or its edit waited offline). What was typed is kept, in a form
    /// that publishes it as a new post.
    private func deletedPage(request: Request, context: SignedInContext, changes: PostChanges, error: AppError) -> Response {
        var kept = changes
        kept.baseVersion = nil
        return form(request: request, context: context, changes: kept, id: nil, current: nil, status: .gone, page: .deleted(error.message))
    }

    @Sendable func destroy(request: Request, context: SignedInContext) async throws -> Response {
        let published = try await posts.findOwn(in: context)
        try await posts.delete(id: published.id)
        if request.wantsTurboStream { return .turboStream(fragments.html(for: .deleted(id: published.id), in: views.language(for: request, context: context))) }
        return .afterSubmit(request, redirectTo: "/posts", native: .recede).flashing(.postDeleted)
    }

    private func form(
        request: Request, context: SignedInContext, changes: PostChanges, id: Int64?, current: Picture?,
        errors: ValidationFailed? = nil, status: HTTPResponse.Status = .ok, page: FormPage? = nil, livePosition: String? = nil
    ) -> Response {
        let fieldErrors = errors?.errors ?? [:]
        let language = views.language(for: request, context: context)
        var values: [String: Any] = [
            "title": id == nil ? Phrase("posts.new.title") : Phrase("posts.edit.title"),
            "form_page": true,
            "form": PostFormView(
                action: id.map { "/posts/\($0)" } ?? "/posts", editing: id != nil, cancel: id.map { "/posts/\($0)" } ?? "/posts",
                title: FormField("title", value: changes.title ?? "", errors: fieldErrors, in: language),
                content: FormField("content", value: changes.content ?? "", errors: fieldErrors, in: language),
                picture: FormField("picture", value: "", errors: fieldErrors, in: language),
                alt: FormField("alt", value: changes.alt ?? "", errors: fieldErrors, in: language),
                current: current.map { PictureView($0, lazy: false) }, version: changes.baseVersion,
                changedNoticeID: livePosition.flatMap { _ in id.map(PostChangedNoticeView.slotID) }
            ),
        ]
        if let livePosition {
            (values["stream_path"], values["stream_position"]) = (streams.path(of: .posts, in: language), livePosition)
        }
        var template = id == nil ? "posts/new" : "posts/edit"
        switch page {
        case .conflict(let conflict)?:
            (values["title"], values["conflict"], template) = (conflict.title, conflict, "posts/conflict")
        case .deleted(let message)?:
            (values["title"], values["deleted_notice"], template) = (Phrase("posts.new.deleted_heading"), message, "posts/new")
        case nil:
            break
        }
        if let errors {
            values["has_errors"] = true
            values["errors"] = errors.fullMessages(in: views.language(for: request, context: context))
        }
        return views.page(template, values, request: request, context: context, status: status)
    }

    /// A form page that says why it is shown again.
    private enum FormPage {
        case conflict(ConflictView)
        /// The post was deleted: the form publishes what was typed as a new one.
        case deleted(String)
    }

    /// The form's fields, Rails' `post[…]` names too. A picture in it is made into its variants here, before
    /// anything is stored; one that is refused fails validation on `picture`, so the form can say why.
    static func formChanges(_ request: Request) async throws -> PostChanges {
        var request = request
        let form = try await request.form()
        func field(_ name: String) -> String? { form.fields[name] ?? form.fields["post[\(name)]"] }
        var changes = PostChanges(title: field("title"), content: field("content"), alt: field("alt"))
        if let version = field("version"), !version.isEmpty {
            guard let number = Int(version) else { throw ValidationFailed(errors: ["version": [Phrase("errors.whole_number")]]) }
            changes.baseVersion = number
        }
        if let file = form.files["picture"] ?? form.files["post[picture]"], file.bytes.readableBytes > 0 {
            do {
                changes.picture = .replace(try await PictureProcessor().process(file.bytes, alt: changes.alt ?? ""))
            } catch let refused as PictureRefused {
                changes.pictureRefused = refused
            }
        } else if let text = field("picture"), !text.isEmpty {
            // A urlencoded form, or a part without a filename, cannot carry a picture's bytes intact.
            changes.pictureRefused = PictureRefused(.unprocessableContent, "must be sent as a file, in a multipart/form-data body")
        } else if ["1", "true", "on"].contains(field("remove_picture")?.lowercased()) {
            changes.picture = .remove
        }
        return changes
    }
}
