import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// Reporting a post or a person to the moderators: `POST /api/v1/reports` for native code, and the form a post's
/// "Report" link opens (a modal sheet in native shells).
struct ReportsController {
    let storage: any ReportStorage
    let posts: PostRepository
    let users: UserRepository
    let views: Views
    let mail: AccountMail
    let outbox: MailSender

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.post("/api/v1/reports", use: createFromAPI)
        signedIn.get("/posts/{id}/report", use: form)
        signedIn.post("/posts/{id}/report", use: createFromForm)
        signedIn.get("/users/{id}/report", use: form)
        signedIn.post("/users/{id}/report", use: createFromForm)
    }

    /// `{"post_id" | "user_id", "reason", "comment"?}`: every problem at once, Rails-style.
    struct ReportBody: FormOrJSONBody {
        static let expectedJSON = #"{"post_id": 1, "reason": "spam", "comment": "…"} or {"user_id": 1, "reason": "harassment"}"#
        var postId: Int64?
        var userId: Int64?
        var reason: String?
        var comment: String?

        init(fields: [String: String]) {
            (postId, userId) = (fields["post_id"].flatMap { Int64($0) }, fields["user_id"].flatMap { Int64($0) })
            (reason, comment) = (fields["reason"], fields["comment"])
        }

        enum CodingKeys: String, CodingKey {
            case postId = "post_id", userId = "user_id", reason, comment
        }
    }

    struct ReportJSON: Encodable {
        let id: Int64
        let status: String
        let reason: String
        let postId: Int64?
        let userId: Int64?
        let createdAt: Date

        init(_ report: Report) {
            (id, status, reason, postId, userId, createdAt) = (
                report.id, report.status.rawValue, report.reason.rawValue, report.postId, report.userId, report.createdAt
            )
        }
    }

    @Sendable func createFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let body = try await request.decodeBody(as: ReportBody.self)
        var errors: [String: [Phrase]] = [:]
        let target: Report.Target? = switch (body.postId, body.userId) {
        case (let post?, nil): .post(post)
        case (nil, let user?): .user(user)
        case (nil, nil): nil
        case (_?, _?): nil
        }
        if target == nil { errors["post_id", default: []].append(Phrase("reports.errors.one_target")) }
        let draft = try validated(target: target, reason: body.reason, comment: body.comment ?? "", reporter: context.identity, errors: &errors)
        switch try await file(draft, reporter: context.identity.user) {
        case .filed(let report):
            var response = Response.json(ReportJSON(report), status: .created)
            response.headers[.location] = "/api/v1/reports/\(report.id)"
            return response
        case .alreadyOpen(let report): return .json(ReportJSON(report))
        case .tooMany(let retryAfter):
            let language = views.language(for: request, context: context)
            return Response.json(["error": language.say(Self.tooManyMessage)], status: .tooManyRequests).retrying(at: retryAfter)
        case .unknownTarget:
            throw ValidationFailed(errors: [target?.isPost == true ? "post_id" : "user_id": [Phrase("reports.errors.nothing_to_report")]])
        }
    }

    /// `moderation/report`: the reasons as a list to choose from, and room for a few words.
    struct ReportFormView: Sendable {
        struct Choice: Sendable {
            let value: String
            let label: String
            let checked: Bool
        }

        let action: String
        let cancel: String
        let subject: String
        let reasons: [Choice]
        let comment: FormField
        let reasonError: String?
        /// Why nothing was filed, beyond a field's problem.
        let message: String?
        let maximumCommentLength = Report.maximumCommentLength
    }

    /// What the form at this path reports: the post, or the person (whom the reader must be able to see).
    private struct FormTarget {
        let target: Report.Target
        let path: String
        let subject: Phrase
        let title: Phrase
    }

    private func formTarget(_ request: Request, _ context: SignedInContext) async throws -> FormTarget {
        if request.uri.path.hasPrefix("/posts/") {
            let post = try await posts.find(in: context)
            return FormTarget(
                target: .post(post.id), path: "/posts/\(post.id)", subject: Phrase("reports.subject.post", ["title": post.post.title, "author": post.author.name]),
                title: Phrase("reports.title.post")
            )
        }
        let user = try await ProfilesController.person(
            try context.parameters.require("id"), visibleTo: context.identity, users: users, blocks: posts.blocks
        )
        let id = user.id ?? 0
        return FormTarget(target: .user(id), path: "/users/\(id)", subject: Phrase("reports.subject.user", ["name": user.name]),
            title: Phrase("reports.title.user")
        )
    }

    @Sendable func form(request: Request, context: SignedInContext) async throws -> Response {
        page(for: try await formTarget(request, context), reason: nil, comment: "", request: request, context: context)
    }

    @Sendable func createFromForm(request: Request, context: SignedInContext) async throws -> Response {
        let target = try await formTarget(request, context)
        var request = request
        let fields = try await request.formFields(limit: 8192)
        var errors: [String: [Phrase]] = [:]
        let comment = fields["comment"] ?? ""
        do {
            let draft = try validated(target: target.target, reason: fields["reason"], comment: comment, reporter: context.identity, errors: &errors)
            switch try await file(draft, reporter: context.identity.user) {
            case .filed, .alreadyOpen:
                return .afterSubmit(request, redirectTo: target.path, native: .recede).flashing(.reportFiled)
            case .tooMany(let retryAfter):
                return page(
                    for: target, reason: fields["reason"], comment: comment, message: Self.tooManyMessage, request: request, context: context,
                    status: .tooManyRequests
                ).retrying(at: retryAfter)
            case .unknownTarget: errors["reason"] = [Phrase("reports.errors.yourself")]
            }
        } catch let invalid as ValidationFailed {
            errors = invalid.errors
        }
        return page(
            for: target, reason: fields["reason"], comment: comment, errors: errors, request: request, context: context, status: .unprocessableContent
        )
    }

    private func page(
        for target: FormTarget, reason: String?, comment: String, errors: [String: [Phrase]] = [:], message: Phrase? = nil, request: Request,
        context: SignedInContext, status: HTTPResponse.Status = .ok
    ) -> Response {
        let language = views.language(for: request, context: context)
        let view = ReportFormView(
            action: target.path + "/report", cancel: target.path, subject: language.say(target.subject),
            reasons: Report.Reason.allCases.map { .init(value: $0.rawValue, label: $0.label(in: language), checked: $0.rawValue == reason) },
            comment: FormField("comment", value: comment, errors: errors, in: language),
            reasonError: errors["reason"].map { $0.map { ValidationFailed.fullMessage(field: "reason", language.say($0), in: language) }.joined(separator: ". ") },
            message: message.map(language.say)
        )
        return views.page("moderation/report", ["title": target.title, "form_page": true, "report": view], request: request, context: context, status: status)
    }

    private func validated(
        target: Report.Target?, reason: String?, comment: String, reporter: Identity, errors: inout [String: [Phrase]]
    ) throws -> ReportDraft {
        let reason = reason.flatMap(Report.Reason.init(rawValue:))
        if reason == nil {
            errors["reason", default: []].append(Phrase("errors.one_of", ["choices": Report.Reason.allCases.map(\.rawValue).joined(separator: ", ")]))
        }
        if comment.unicodeScalars.count > Report.maximumCommentLength {
            errors["comment", default: []].append(Phrase("errors.too_long", count: Report.maximumCommentLength))
        }
        guard errors.isEmpty, let target, let reason else { throw ValidationFailed(errors: errors) }
        return ReportDraft(reporterId: reporter.userId, target: target, reason: reason, comment: comment)
    }

    private func file(_ draft: ReportDraft, reporter: User) async throws -> FiledReport {
        let filed = try await storage.file(draft, now: Date(), mails: Self.moderatorMails(mail: mail, reporterName: reporter.name))
        if case .filed = filed { outbox.nudge() }
        return filed
    }

    /// What each moderator is mailed about a new report (`reporterName` nil: a post held for a watched word).
    static func moderatorMails(mail: AccountMail, reporterName: String?) -> ReportMails {
        { report, reported, moderators in
            moderators.map { moderator in
                let language = mail.language(of: moderator)
                let (target, reason) = (reported.said(in: language), report.reason.label(in: language))
                var paragraphs = [
                    reporterName.map { language.text("moderation.mail.new_report.body", ["reporter": $0, "target": target, "reason": reason]) }
                        ?? language.text("moderation.mail.held.body", ["target": target]),
                ]
                if !report.comment.isEmpty {
                    paragraphs.append(reporterName == nil ? report.comment : language.text("moderation.mail.in_their_words", ["comment": report.comment]))
                }
                paragraphs.append(language.text("moderation.mail.answer_within"))
                return mail.compose(
                    to: moderator.email, name: moderator.name, in: language,
                    subject: reporterName == nil
                        ? language.text("moderation.mail.held.subject") : language.text("moderation.mail.new_report.subject", ["reason": reason]),
                    paragraphs: paragraphs, button: (language.text("moderation.mail.open_queue"), "\(mail.origin)/moderation"),
                    closing: language.text("moderation.mail.because_moderator")
                )
            }
        }
    }

    static let tooManyMessage = Phrase("reports.errors.too_many", count: Report.hourlyLimit)
}

extension Response {
    /// This `429` says when to try again.
    func retrying(at date: Date) -> Response {
        var response = self
        response.headers[.retryAfter] = String(max(1, Int(date.timeIntervalSinceNow.rounded(.up))))
        return response
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension ReportsController.ReportFormView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "action": action
        case "cancel": cancel
        case "subject": subject
        case "reasons": reasons
        case "comment": comment
        case "reasonError": reasonError
        case "message": message
        case "maximumCommentLength": maximumCommentLength
        default: nil
        }
    }
}

extension ReportsController.ReportFormView.Choice: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "value": value
        case "label": label
        case "checked": checked
        default: nil
        }
    }
}
