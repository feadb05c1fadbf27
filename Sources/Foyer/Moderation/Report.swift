import Foundation

/// Someone telling moderators that a post or a person breaks the terms. It keeps a copy of the post as it was, so an
/// edit or a deletion afterwards hides nothing from them.
struct Report: Sendable {
    enum Reason: String, CaseIterable, Sendable {
        case spam, harassment, hate, sexual, violence, illegal, other

        /// How the form says it, in the reader's language.
        func label(in language: Language) -> String {
            switch self {
            case .spam: language.text("reports.reason.spam")
            case .harassment: language.text("reports.reason.harassment")
            case .hate: language.text("reports.reason.hate")
            case .sexual: language.text("reports.reason.sexual")
            case .violence: language.text("reports.reason.violence")
            case .illegal: language.text("reports.reason.illegal")
            case .other: language.text("reports.reason.other")
            }
        }
    }

    enum Status: String, Sendable {
        case open, resolved
    }

    /// What is reported: a post (and with it its author) or a person.
    enum Target: Sendable, Equatable {
        case post(Int64)
        case user(Int64)
    }

    /// 0 until the store gives it its number.
    var id: Int64
    let reporterId: Int64?
    let postId: Int64?
    /// The person reported, or the author of the post reported.
    let userId: Int64?
    let reason: Reason
    let comment: String
    let keptTitle: String?
    let keptContent: String?
    let keptPictureAlt: String?
    let status: Status
    let createdAt: Date
    let resolvedAt: Date?

    static let maximumCommentLength = 1000
    /// Reports one person may make in an hour.
    static let hourlyLimit = 20
}

/// What someone asked to report, before it is stored.
struct ReportDraft: Sendable {
    let reporterId: Int64
    let target: Report.Target
    let reason: Report.Reason
    let comment: String
}

/// How filing a report went.
enum FiledReport: Sendable {
    /// A new report, and the moderators it was mailed to.
    case filed(Report)
    /// The same person reported the same thing while their report is still open: that report.
    case alreadyOpen(Report)
    /// Over the hourly limit: try again after the oldest report of the hour is an hour old.
    case tooMany(retryAfter: Date)
    /// No such post or person (or it is the reporter's own).
    case unknownTarget
}

/// What the moderators are mailed about a new report; built inside the report's own transaction, when the post's
/// copy and the moderators' addresses are known.
typealias ReportMails = @Sendable (_ report: Report, _ reported: ModerationTarget, _ moderators: [User]) -> [OutgoingMail]
