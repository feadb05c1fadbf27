/// A post as a list row (`posts/row`): the same for every viewer.
struct PostRowView: Sendable {
    let id: Int64
    let title: String
    let excerpt: String
    let author: String
    let createdAt: TimeView

    init(_ published: PublishedPost, time: ReaderTime = ReaderTime()) {
        id = published.id
        title = published.post.title
        excerpt = PostText.excerpt(published.post.content)
        author = published.author.name
        createdAt = time.view(of: published.post.createdAt)
    }
}

/// A post's page body (`posts/content`): the same for every viewer; the author's buttons stay outside it.
struct PostContentView: Sendable {
    let id: Int64
    let title: String
    let contentHTML: String
    let author: String
    let createdAt: TimeView
    let updatedAt: TimeView
    let edited: Bool

    init(_ published: PublishedPost, time: ReaderTime = ReaderTime()) {
        id = published.id
        title = published.post.title
        contentHTML = PostText.html(published.post.content)
        author = published.author.name
        createdAt = time.view(of: published.post.createdAt)
        updatedAt = time.view(of: published.post.updatedAt)
        edited = published.post.updatedAt > published.post.createdAt
    }
}

/// The post form (`posts/form`): where it goes, and each field with what is wrong with it.
struct PostFormView: Sendable {
    let action: String
    let editing: Bool
    let cancel: String
    let title: FormField
    let content: FormField
}

/// What a write did to a post, for whoever follows posts.
enum PostChange: Sendable {
    case created(PublishedPost)
    case updated(PublishedPost)
    case deleted(id: Int64)
}

/// The `<turbo-stream>` HTML that shows a post change on open pages: the first list page (`posts`), rows
/// (`post_ID`) and the post's own page (`post_ID_content`, `post_ID_detail`).
struct PostFragments: Sendable {
    let views: Views

    func html(for change: PostChange) -> String {
        switch change {
        case .created(let published):
            TurboStream.prepend("posts", views.render("posts/row", PostRowView(published)))
        case .updated(let published):
            TurboStream.replace("post_\(published.id)", views.render("posts/row", PostRowView(published)))
                + TurboStream.replace("post_\(published.id)_content", views.render("posts/content", PostContentView(published)))
        case .deleted(let id):
            TurboStream.remove("post_\(id)") + TurboStream.replace("post_\(id)_detail", views.render("posts/deleted", ["id": id]))
        }
    }
}
