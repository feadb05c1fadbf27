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
    var label: String {
        switch self {
        case .dismiss: "Dismiss"
        case .removePost: "Remove post"
        case .restore: "Restore post"
        case .suspendUser: "Suspend account"
        case .unsuspend: "Lift suspension"
        case .warn: "Warn"
        case .approve: "Approve post"
        case .role: "Change role"
        case .blocked: "Blocked"
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

/// One line of the audit log.
struct ModerationLogEntry: Sendable {
    let id: Int64
    let moderatorId: Int64?
    let moderatorName: String
    let action: ModerationAction
    let reportId: Int64?
    let postId: Int64?
    let userId: Int64?
    /// What the action was on, in words ("the post “Buy now” by Ada").
    let target: String
    let note: String
    let createdAt: Date
}

/// An action asked for, on the target of `report`.
struct ModerationRequest: Sendable {
    let action: ModerationAction
    let report: Report
    let moderator: User
    let note: String
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
typealias ModerationMails = @Sendable (_ affected: User?, _ reporters: [User], _ target: String) -> [OutgoingMail]
