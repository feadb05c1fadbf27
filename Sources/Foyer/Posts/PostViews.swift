import Mustache

/// A post as a list row (`posts/row`): the same for every viewer.
struct PostRowView: Sendable {
    let id: Int64
    let title: String
    let excerpt: String
    let author: String
    let createdAt: TimeView
    let picture: PictureView?

    /// `position`: the row's place in its list; thumbnails below the first screenful load lazily.
    init(_ published: PublishedPost, time: ReaderTime, position: Int = 0) {
        id = published.id
        title = published.post.title
        excerpt = PostText.excerpt(published.post.content)
        author = published.author.name
        createdAt = time.view(of: published.post.createdAt)
        picture = published.picture.map { PictureView($0, lazy: position >= PictureView.eagerRows) }
    }
}

/// A post's picture in a page: both variants for `srcset`, the sizes that keep the layout from shifting, the alt.
struct PictureView: Sendable {
    /// List rows whose thumbnails load at once: about a phone's first screen.
    static let eagerRows = 4
    let pagePath: String
    let thumbnailPath: String
    let width: Int
    let height: Int
    let thumbnailWidth: Int
    let thumbnailHeight: Int
    let alt: String
    let lazy: Bool

    init(_ picture: Picture, lazy: Bool) {
        pagePath = picture.path(.page)
        thumbnailPath = picture.path(.thumbnail)
        (width, height, thumbnailWidth, thumbnailHeight) = (picture.width, picture.height, picture.thumbnailWidth, picture.thumbnailHeight)
        alt = picture.alt
        self.lazy = lazy
    }
}

/// A post's page body (`posts/content`): the same for every viewer; the author's buttons stay outside it.
struct PostContentView: Sendable {
    let id: Int64
    let title: String
    let contentHTML: String
    let author: String
    /// The author's profile.
    let authorPath: String
    let createdAt: TimeView
    let updatedAt: TimeView
    let edited: Bool
    /// What a moderator did, shown to the author and moderators who still see it.
    let hiddenNotice: String?
    /// At the top of the page: loaded at once.
    let picture: PictureView?

    init(_ published: PublishedPost, time: ReaderTime) {
        id = published.id
        title = published.post.title
        contentHTML = PostText.html(published.post.content)
        author = published.author.name
        authorPath = "/users/\(published.author.id)"
        createdAt = time.view(of: published.post.createdAt)
        updatedAt = time.view(of: published.post.updatedAt)
        edited = published.post.updatedAt > published.post.createdAt
        hiddenNotice = switch published.post.hidden {
        case .removed?: "A moderator removed this post: only its author and moderators see it."
        case .held?: "This post waits for a moderator's review: only its author and moderators see it."
        case nil: published.authorSuspended ? "Its author's account is suspended: only its author and moderators see it." : nil
        }
        picture = published.picture.map { PictureView($0, lazy: false) }
    }
}

/// The post form (`posts/form`): where it goes, and each field with what is wrong with it.
struct PostFormView: Sendable {
    let action: String
    let editing: Bool
    let cancel: String
    let title: FormField
    let content: FormField
    /// The file field: only ever an error to show (a browser never sends a file back into a form).
    let picture: FormField
    let alt: FormField
    /// The picture the post has now, on the edit form.
    let current: PictureView?
    /// The version the edit form was rendered at: a save from it goes only over that version.
    var version: Int? = nil
    /// Where an edit form shows that a newer version was saved while it is open (`posts/changed`).
    var changedNoticeID: String? = nil
}

/// `posts/changed`: shown in an open edit form when its post is saved elsewhere (the live stream replaces the
/// form's empty slot; `live.js` applies it only over an older version than this one).
struct PostChangedNoticeView: Sendable {
    let slotID: String
    let version: Int
    let savedBy: String
    let savedAt: TimeView

    init(_ published: PublishedPost, time: ReaderTime) {
        slotID = Self.slotID(published.id)
        version = published.post.version
        savedBy = published.author.name
        savedAt = time.view(of: published.post.updatedAt)
    }

    static func slotID(_ id: Int64) -> String { "post_\(id)_changed" }
}

/// What a write did to a post, for whoever follows posts.
enum PostChange: Sendable {
    case created(PublishedPost)
    case updated(PublishedPost)
    case deleted(id: Int64)

    /// Whose words the change shows: a reader kept apart from them by a block is not sent it. A removal shows nobody's.
    var author: Int64? {
        switch self {
        case .created(let published), .updated(let published): published.post.authorId
        case .deleted: nil
        }
    }
}

/// The `<turbo-stream>` HTML that shows a post change on open pages: the first list page (`posts`), rows
/// (`post_ID`), the post's own page (`post_ID_content`, `post_ID_detail`) and its open edit forms (`post_ID_changed`).
/// Rendered once per language: each rendering reaches every follower in that language.
struct PostFragments: Sendable {
    let views: Views

    func html(for change: PostChange, in language: Language) -> String {
        let time = ReaderTime(language: language)
        return switch change {
        case .created(let published):
            TurboStream.prepend("posts", views.render("posts/row", PostRowView(published, time: time), in: language))
        case .updated(let published):
            TurboStream.replace("post_\(published.id)", views.render("posts/row", PostRowView(published, time: time), in: language))
                + TurboStream.replace("post_\(published.id)_content", views.render("posts/content", PostContentView(published, time: time), in: language))
                + TurboStream.replace(PostChangedNoticeView.slotID(published.id), views.render("posts/changed", PostChangedNoticeView(published, time: time), in: language))
        case .deleted(let id):
            TurboStream.remove("post_\(id)") + TurboStream.replace("post_\(id)_detail", views.render("posts/deleted", ["id": id], in: language))
        }
    }
}

// Templates read these views by name. Without `MustacheParent` swift-mustache finds a name through `Mirror`, which
// boxes every property for each name looked up (and for each view on the context stack a name passes on its way
// out): on a post's page that was a third of the request. `ViewNamesTests` holds each of these to what `Mirror`
// would find.

extension PostRowView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "title": title
        case "excerpt": excerpt
        case "author": author
        case "createdAt": createdAt
        case "picture": picture
        default: nil
        }
    }
}

extension PictureView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "pagePath": pagePath
        case "thumbnailPath": thumbnailPath
        case "width": width
        case "height": height
        case "thumbnailWidth": thumbnailWidth
        case "thumbnailHeight": thumbnailHeight
        case "alt": alt
        case "lazy": lazy
        default: nil
        }
    }
}

extension PostContentView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "title": title
        case "contentHTML": contentHTML
        case "author": author
        case "authorPath": authorPath
        case "createdAt": createdAt
        case "updatedAt": updatedAt
        case "edited": edited
        case "hiddenNotice": hiddenNotice
        case "picture": picture
        default: nil
        }
    }
}

extension PostFormView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "action": action
        case "editing": editing
        case "cancel": cancel
        case "title": title
        case "content": content
        case "picture": picture
        case "alt": alt
        case "current": current
        case "version": version
        case "changedNoticeID": changedNoticeID
        default: nil
        }
    }
}

extension PostChangedNoticeView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "slotID": slotID
        case "version": version
        case "savedBy": savedBy
        case "savedAt": savedAt
        default: nil
        }
    }
}
