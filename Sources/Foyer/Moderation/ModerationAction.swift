import Foundation

/// What a moderator may do about a report, as Mastodon and Discourse offer it.
enum ModerationAction: String, CaseIterable, Sendable, Codable {
    /// Nothing breaks the terms: the reports are closed.
    case dismiss
    /// The post is gone for everyone but its author and moderators; restorable for 30 days, then deleted.
    case removePost = "remove_post"
    case restore
    /// The person may not sign in, every session of theirs ends, and nobody else sees their posts.
    case suspendUser = "suspend_user"
    case unsuspend
    /// The person is mailed the moderator's note.
    case warn
    /// A post held for a watched word is shown to everyone.
    case approve
    /// An admin gave or took a role (not an action on a report).
    case role
    /// Someone blocked someone: a notice for the moderators, as app stores ask (not an action on a report).
    case blocked

    /// Actions on a post need the report to name one.
    var needsPost: Bool { [.removePost, .restore, .approve].contains(self) }

    /// Actions on a person reach every open report about them, their posts' included.
    var coversThePerson: Bool { [.suspendUser, .unsuspend].contains(self) }

    /// How the queue's buttons and the audit log say it.
    func label(in language: Language) -> String {
        switch self {
        case .dismiss: language.text("moderation.action.dismiss")
        case .removePost: language.text("moderation.action.remove_post")
        case .restore: language.text("moderation.action.restore")
        case .suspendUser: language.text("moderation.action.suspend_user")
        case .unsuspend: language.text("moderation.action.unsuspend")
        case .warn: language.text("moderation.action.warn")
        case .approve: language.text("moderation.action.approve")
        case .role: language.text("moderation.action.role")
        case .blocked: language.text("moderation.action.blocked")
        }
    }

    /// The actions a report's page offers.
    static let onReports: [ModerationAction] = [.dismiss, .removePost, .warn, .suspendUser, .restore, .unsuspend, .approve]
}

/// A report as the queue shows it: with the names of who reported and who is reported, and the post as it is now.
struct ReportRecord: Sendable {
    let report: Report
    let reporterName: String?
    let reportedName: String?
    let reportedSuspended: Bool
    /// The post's state now: nil when it is gone (deleted by its author, or purged after removal).
    let postState: PostState?

    enum PostState: Sendable, Equatable {
        case shown
        case hidden(Post.Hidden)
    }
}

/// What a report or an action is about, kept as names rather than words, so that each reader is told it in their
/// own language: "the post “Buy now” by Ada", "a publicação “Buy now” de Ada", "Ada 的帖子“Buy now”".
struct ModerationTarget: Sendable, Equatable {
    enum Kind: String, Sendable { case post, account }
    let kind: Kind
    /// The post's title as it was; nil for an account.
    let postTitle: String?
    /// Whose post or account it is; nil once their account is deleted.
    let name: String?

    static func post(title: String, by name: String?) -> ModerationTarget { ModerationTarget(kind: .post, postTitle: title, name: name) }
    static func account(of name: String?) -> ModerationTarget { ModerationTarget(kind: .account, postTitle: nil, name: name) }

    func said(in language: Language) -> String {
        let name = name ?? language.text("moderation.target.deleted_account")
        return switch kind {
        case .post: language.text("moderation.target.post", ["title": postTitle ?? "", "name": name])
        case .account: language.text("moderation.target.account", ["name": name])
        }
    }
}

/// One line of the audit log.
struct ModerationLogEntry: Sendable {
    let id: Int64
    let moderatorId: Int64?
    let moderatorName: String
    let action: ModerationAction
    let reportId: Int64?
    let postId: Int64?
    let userId: Int64?
    /// What the action was on, in the words of the server's default language when it was taken ("the post “Buy
    /// now” by Ada"): what a line written before languages has, and what someone reading the table sees.
    let target: String
    /// The same, as names, said in each reader's language; nil on lines written before languages.
    let about: ModerationTarget?
    let note: String
    let createdAt: Date

    init(
        id: Int64 = 0, moderatorId: Int64?, moderatorName: String, action: ModerationAction, reportId: Int64?, postId: Int64?, userId: Int64?,
        about: ModerationTarget, in language: Language, note: String, createdAt: Date
    ) {
        self.init(
            id: id, moderatorId: moderatorId, moderatorName: moderatorName, action: action, reportId: reportId, postId: postId, userId: userId,
            target: about.said(in: language), about: about, note: note, createdAt: createdAt
        )
    }

    init(
        id: Int64, moderatorId: Int64?, moderatorName: String, action: ModerationAction, reportId: Int64?, postId: Int64?, userId: Int64?,
        target: String, about: ModerationTarget?, note: String, createdAt: Date
    ) {
        (self.id, self.moderatorId, self.moderatorName, self.action, self.reportId, self.postId, self.userId) = (
            id, moderatorId, moderatorName, action, reportId, postId, userId
        )
        (self.target, self.about, self.note, self.createdAt) = (target, about, note, createdAt)
    }

    /// What the line is about, in `language`.
    func target(in language: Language) -> String { about?.said(in: language) ?? target }
}

/// An action asked for, on the target of `report`.
struct ModerationRequest: Sendable {
    let action: ModerationAction
    let report: Report
    let moderator: User
    let note: String
    /// The server's default language: the log keeps the target's words in it too.
    let language: Language
}

/// What an action did, for the work that follows it outside the store (live pages, sessions, metrics).
struct ModerationOutcome: Sendable {
    /// Open reports it closed.
    let resolved: Int
    /// Posts that left or came back into everyone's view.
    let postIDs: [Int64]
    let entry: ModerationLogEntry
}

/// The mail an action sends, made in its transaction: to the person it affects (nil when it affects nobody) and to
/// each person whose report it closed.
typealias ModerationMails = @Sendable (_ affected: User?, _ reporters: [User], _ target: ModerationTarget) -> [OutgoingMail]
