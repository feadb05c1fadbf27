import Foundation

/// What moderation tells people by mail: the person an action affects (why, and how to appeal), and each person
/// whose report it closed (that it was handled, never by whom or what they were told).
struct ModerationMail: Sendable {
    let mail: AccountMail
    let contactEmail: String

    func mails(for action: ModerationAction, note: String) -> ModerationMails {
        { affected, reporters, target in
            var mails: [OutgoingMail] = []
            if let affected, let notice = notice(action, note: note, target: target) {
                mails.append(mail.compose(
                    to: affected.email, name: affected.name, in: mail.languages.fallback, subject: notice.subject, paragraphs: notice.paragraphs, button: nil,
                    closing: notice.appeal ? "To appeal, reply by writing to \(contactEmail)." : "Thank you for keeping to the terms."
                ))
            }
            mails += reporters.map { reporter in
                mail.compose(
                    to: reporter.email, name: reporter.name, in: mail.languages.fallback, subject: "Your report was handled",
                    paragraphs: ["A moderator reviewed your report about \(target). \(Self.outcome(action))", "Thank you for telling us."],
                    button: nil, closing: "Questions? Write to \(contactEmail)."
                )
            }
            return mails
        }
    }

    private func notice(_ action: ModerationAction, note: String, target: String) -> (subject: String, paragraphs: [String], appeal: Bool)? {
        let why = note.isBlank ? [] : ["The moderator's words: “\(note)”"]
        switch action {
        case .removePost:
            return ("Your post was removed", ["A moderator removed \(target): it breaks the terms of use."] + why, true)
        case .suspendUser:
            return (
                "Your account is suspended",
                ["A moderator suspended your account for breaking the terms of use: you cannot sign in, and nobody else sees your posts."] + why, true
            )
        case .warn:
            return ("A warning from the moderators", ["A moderator looked at \(target) and warns you to keep to the terms of use."] + why, true)
        case .unsuspend:
            return ("Your account is open again", ["A moderator lifted the suspension of your account: you can sign in again."] + why, false)
        case .restore, .approve:
            return ("Your post is shown again", ["A moderator made \(target) visible to everyone again."] + why, false)
        case .dismiss, .role, .blocked:
            return nil
        }
    }

    private static func outcome(_ action: ModerationAction) -> String {
        switch action {
        case .dismiss, .restore, .approve, .unsuspend, .role, .blocked: "They found that it does not break the terms, so it stays."
        case .removePost: "It broke the terms and has been removed."
        case .suspendUser: "It broke the terms, and the account has been suspended."
        case .warn: "The person has been warned."
        }
    }
}
