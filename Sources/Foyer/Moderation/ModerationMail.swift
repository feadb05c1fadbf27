import Foundation

/// What moderation tells people by mail: the person an action affects (why, and how to appeal), and each person
/// whose report it closed (that it was handled, never by whom or what they were told). Each in their own language.
struct ModerationMail: Sendable {
    let mail: AccountMail
    let contactEmail: String

    func mails(for action: ModerationAction, note: String) -> ModerationMails {
        { affected, reporters, target in
            var mails: [OutgoingMail] = []
            if let affected {
                let language = mail.language(of: affected)
                if let notice = notice(action, note: note, target: target.said(in: language), in: language) {
                    mails.append(mail.compose(
                        to: affected.email, name: affected.name, in: language, subject: notice.subject, paragraphs: notice.paragraphs, button: nil,
                        closing: notice.appeal
                            ? language.text("moderation.mail.closing_appeal", ["contact": contactEmail]) : language.text("moderation.mail.closing_thanks")
                    ))
                }
            }
            mails += reporters.map { reporter in
                let language = mail.language(of: reporter)
                return mail.compose(
                    to: reporter.email, name: reporter.name, in: language, subject: language.text("moderation.mail.handled.subject"),
                    paragraphs: [
                        language.text("moderation.mail.handled.body", ["target": target.said(in: language), "outcome": Self.outcome(action, in: language)]),
                        language.text("moderation.mail.handled.thanks"),
                    ],
                    button: nil, closing: language.text("moderation.mail.questions", ["contact": contactEmail])
                )
            }
            return mails
        }
    }

    private func notice(_ action: ModerationAction, note: String, target: String, in language: Language) -> (subject: String, paragraphs: [String], appeal: Bool)? {
        let why = note.isBlank ? [] : [language.text("moderation.mail.moderator_words", ["note": note])]
        let values = ["target": target]
        switch action {
        case .removePost:
            return (language.text("moderation.mail.removed.subject"), [language.text("moderation.mail.removed.body", values)] + why, true)
        case .suspendUser:
            return (language.text("moderation.mail.suspended.subject"), [language.text("moderation.mail.suspended.body")] + why, true)
        case .warn:
            return (language.text("moderation.mail.warned.subject"), [language.text("moderation.mail.warned.body", values)] + why, true)
        case .unsuspend:
            return (language.text("moderation.mail.unsuspended.subject"), [language.text("moderation.mail.unsuspended.body")] + why, false)
        case .restore, .approve:
            return (language.text("moderation.mail.restored.subject"), [language.text("moderation.mail.restored.body", values)] + why, false)
        case .dismiss, .role, .blocked:
            return nil
        }
    }

    private static func outcome(_ action: ModerationAction, in language: Language) -> String {
        switch action {
        case .dismiss, .restore, .approve, .unsuspend, .role, .blocked: language.text("moderation.outcome.stays")
        case .removePost: language.text("moderation.outcome.removed")
        case .suspendUser: language.text("moderation.outcome.suspended")
        case .warn: language.text("moderation.outcome.warned")
        }
    }
}
