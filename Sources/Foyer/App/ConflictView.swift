import Mustache

/// `shared/conflict`: a save from a form rendered at an older version, for tasks and posts alike (as MediaWiki's
/// edit conflict page): who saved the newer version and when, theirs beside yours, and then the record's own form,
/// filled with yours at the version it is now, so saving from it goes over the latest.
struct ConflictView: Sendable {
    /// One version, as the reader compares them.
    struct Side: Sendable {
        let title: String
        /// A short fact beside the title (a task's status).
        var detail: String? = nil
        /// Already HTML: the record's own rendering of its text.
        let bodyHTML: String
        /// A line under it (a picture's description).
        var note: String? = nil
    }

    enum Record: Sendable { case post, task }

    /// Which template words the page takes (`conflict.post.*`, `conflict.task.*`).
    let isPost: Bool
    /// Who saved the newer version, when known (a task server does not say).
    let savedBy: String?
    let savedAt: TimeView?
    let theirs: Side
    let yours: Side

    /// "Someone changed this post": the page's title (its heading is the template's).
    let title: Phrase

    init(record: Record, savedBy: String?, savedAt: TimeView?, theirs: Side, yours: Side) {
        (self.savedBy, self.savedAt, self.theirs, self.yours) = (savedBy, savedAt, theirs, yours)
        isPost = record == .post
        title = record == .post ? Phrase("conflict.post.heading") : Phrase("conflict.task.heading")
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension ConflictView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "isPost": isPost
        case "savedBy": savedBy
        case "savedAt": savedAt
        case "theirs": theirs
        case "yours": yours
        case "title": title
        default: nil
        }
    }
}

extension ConflictView.Side: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "title": title
        case "detail": detail
        case "bodyHTML": bodyHTML
        case "note": note
        default: nil
        }
    }
}
