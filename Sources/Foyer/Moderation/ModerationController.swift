import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// The moderators' queue: open reports grouped by what they are about, oldest first, each with the copy the report
/// kept and the actions to take; the audit log; and for admins, roles. `/moderation` for browsers,
/// `/api/v1/moderation/…` for native screens.
struct ModerationController {
    let storage: any ModerationStorage
    let posts: PostRepository
    let users: UserRepository
    let signIn: SignIn
    let views: Views
    let mail: ModerationMail
    let outbox: MailSender
    let metrics: FoyerMetrics

    static let queueLimit = 500

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.get("/moderation", use: queue)
        signedIn.get("/moderation/audit", use: auditPage)
        signedIn.get("/moderation/reports/{id}/picture", use: keptPicture)
        signedIn.post("/moderation/reports/{id}/actions", use: actFromForm)
        signedIn.post("/moderation/roles", use: roleFromForm)
        signedIn.get("/api/v1/moderation/reports", use: reportsJSON)
        signedIn.post("/api/v1/moderation/reports/{id}/actions", use: actFromAPI)
        signedIn.get("/api/v1/moderation/audit", use: auditJSON)
        signedIn.post("/api/v1/moderation/roles", use: roleFromAPI)
    }

    // MARK: The queue

    /// `moderation/queue`: one entry for each post or person reported.
    struct QueueView: Sendable {
        struct Entry: Sendable {
            let reportId: Int64
            let subject: String
            let postPath: String?
            let keptTitle: String?
            let keptContent: String?
            let keptPictureAlt: String?
            /// The picture the report kept, when the post had one.
            let keptPicturePath: String?
            let state: String?
            let waiting: TimeView
            let reporterCount: Int
            /// "2 people", or the watched words for a post held by them. (Templates read stored properties only.)
            let reportedBy: String
            let reasons: String
            let comments: [String]
            let actions: [Choice]
        }

        struct Choice: Sendable {
            let value: String
            let label: String
            /// `destructive` for what takes something from someone, else `secondary`.
            var style = "secondary"
        }

        let resolved: Bool
        let entries: [Entry]
        let isEmpty: Bool
        let admin: Bool
        let roles: [Choice]
    }

    @Sendable func queue(request: Request, context: SignedInContext) async throws -> Response {
        let moderator = try Self.requireModerator(context)
        let resolved = request.uri.queryParameters["status"] == "resolved"
        let records = try await storage.reports(status: resolved ? .resolved : .open, limit: Self.queueLimit)
        let language = views.language(for: request, context: context)
        let time = ReaderTime(request, language: language)
        let entries = Self.grouped(records).map { group in
            let first = group[0]
            let report = first.report
            let reasons = Dictionary(grouping: group, by: { $0.report.reason }).sorted { ($0.value.count, $1.key.rawValue) > ($1.value.count, $0.key.rawValue) }
            let reporters = Set(group.compactMap(\.report.reporterId)).count
            return QueueView.Entry(
                reportId: report.id, subject: Self.subject(first, in: language), postPath: report.postId.map { "/posts/\($0)" },
                keptTitle: report.keptTitle, keptContent: report.keptContent.map { String($0.prefix(600)) }, keptPictureAlt: report.keptPictureAlt,
                keptPicturePath: report.keptPictureAlt.map { _ in Self.keptPicturePath(report.id) }, state: Self.state(first, in: language),
                waiting: time.view(of: report.createdAt), reporterCount: reporters,
                reportedBy: reporters == 0 ? language.text("moderation.queue.watched_words") : language.plural("moderation.queue.people", count: reporters),
                reasons: reasons.map { "\($0.key.label(in: language)) (\($0.value.count))" }.joined(separator: language.text("list.separator")),
                comments: group.compactMap { $0.report.comment.isEmpty ? nil : $0.report.comment },
                actions: Self.actions(for: first).map {
                    QueueView.Choice(value: $0.rawValue, label: $0.label(in: language), style: [.removePost, .suspendUser].contains($0) ? "destructive" : "secondary")
                }
            )
        }
        let view = QueueView(
            resolved: resolved, entries: entries, isEmpty: entries.isEmpty, admin: moderator.role == .admin,
            roles: [
                QueueView.Choice(value: "none", label: language.text("moderation.roles.none")),
                QueueView.Choice(value: User.Role.moderator.rawValue, label: language.text("moderation.roles.moderator")),
                QueueView.Choice(value: User.Role.admin.rawValue, label: language.text("moderation.roles.admin")),
            ]
        )
        return views.page("moderation/queue", ["title": Phrase("moderation.queue.title"), "queue": view], request: request, context: context)
    }

    static func keptPicturePath(_ reportId: Int64) -> String { "/moderation/reports/\(reportId)/picture" }

    /// `GET /moderation/reports/{id}/picture`: the picture a report kept of its post, for moderators only, never
    /// kept by a browser's cache (the post may be gone, and the picture with it).
    @Sendable func keptPicture(request: Request, context: SignedInContext) async throws -> Response {
        _ = try Self.requireModerator(context)
        guard let id = Int64(try context.parameters.require("id")), let kept = try await storage.keptPicture(of: id) else {
            throw AppError(.notFound, title: Phrase("moderation.errors.no_picture.title"), message: Phrase("moderation.errors.no_picture"))
        }
        return Response(
            status: .ok, headers: [.contentType: kept.contentType, .cacheControl: "private, no-store"], body: .init(byteBuffer: kept.bytes)
        )
    }

    /// Reports about one post, or about one person (not a post of theirs), together, in the order of their oldest.
    static func grouped(_ records: [ReportRecord]) -> [[ReportRecord]] {
        var order: [String] = []
        var groups: [String: [ReportRecord]] = [:]
        for record in records {
            let key = record.report.postId.map { "post \($0)" } ?? "user \(record.report.userId ?? 0)"
            if groups[key] == nil { order.append(key) }
            groups[key, default: []].append(record)
        }
        return order.map { groups[$0]! }
    }

    static func subject(_ record: ReportRecord, in language: Language) -> String {
        let name = record.reportedName ?? language.text("moderation.target.deleted_account")
        if record.report.postId != nil { return language.text("moderation.subject.post", ["name": name]) }
        return language.text("moderation.subject.account", ["name": name])
    }

    static func state(_ record: ReportRecord, in language: Language) -> String? {
        var states: [String] = []
        if record.report.postId != nil {
            switch record.postState {
            case nil: states.append(language.text("moderation.state.deleted"))
            case .hidden(.removed)?: states.append(language.text("moderation.state.removed"))
            case .hidden(.held)?: states.append(language.text("moderation.state.held"))
            case .shown?: break
            }
        }
        if record.reportedSuspended { states.append(language.text("moderation.state.suspended")) }
        return states.isEmpty ? nil : states.joined(separator: language.text("list.separator"))
    }

    /// The actions that make sense for the report's target as it is now.
    static func actions(for record: ReportRecord) -> [ModerationAction] {
        var actions: [ModerationAction] = [.dismiss, .warn]
        if record.report.postId != nil {
            switch record.postState {
            case .shown?: actions.append(.removePost)
            case .hidden(.held)?: actions += [.approve, .removePost]
            case .hidden(.removed)?: actions.append(.restore)
            case nil: break
            }
        }
        if record.report.userId != nil { actions.append(record.reportedSuspended ? .unsuspend : .suspendUser) }
        return actions
    }

    // MARK: Acting

    struct ActionBody: FormOrJSONBody {
        static let expectedJSON = #"{"action": "remove_post", "note": "…"}"#
        var action: String?
        var note: String?

        init(fields: [String: String]) {
            (action, note) = (fields["action"], fields["note"])
        }
    }

    static let maximumNoteLength = 2000

    @Sendable func actFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        let moderator = try Self.requireModerator(context)
        var request = request
        let body = try await request.decodeBody(as: ActionBody.self)
        let language = views.language(for: request, context: context)
        let outcome = try await act(body, reportID: context.parameters.require("id"), moderator: moderator)
        return .json(ActionJSON(outcome, in: language))
    }

    @Sendable func actFromForm(request: Request, context: SignedInContext) async throws -> Response {
        let moderator = try Self.requireModerator(context)
        var request = request
        let body = ActionBody(fields: try await request.formFields(limit: 16384))
        _ = try await act(body, reportID: context.parameters.require("id"), moderator: moderator)
        return .afterSubmit(request, redirectTo: "/moderation", native: .refresh).flashing(.moderationDone)
    }

    private func act(_ body: ActionBody, reportID: String, moderator: User) async throws -> ModerationOutcome {
        guard let id = Int64(reportID), let report = try await storage.report(id: id) else {
            throw AppError(.notFound, title: Phrase("moderation.errors.no_report.title"), message: Phrase("moderation.errors.no_report", ["id": reportID]))
        }
        let note = (body.note ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        var errors: [String: [Phrase]] = [:]
        let action = body.action.flatMap(ModerationAction.init(rawValue:)).flatMap { ModerationAction.onReports.contains($0) ? $0 : nil }
        if action == nil {
            errors["action"] = [Phrase("errors.one_of", ["choices": ModerationAction.onReports.map(\.rawValue).joined(separator: ", ")])]
        } else if action?.needsPost == true, report.postId == nil {
            errors["action"] = [Phrase("moderation.errors.acts_on_a_post")]
        }
        if note.unicodeScalars.count > Self.maximumNoteLength {
            errors["note"] = [Phrase("errors.too_long", count: Self.maximumNoteLength)]
        }
        guard errors.isEmpty, let action else { throw ValidationFailed(errors: errors) }
        let request = ModerationRequest(action: action, report: report, moderator: moderator, note: note, language: views.languages.fallback)
        guard let outcome = try await storage.act(request, now: Date(), mails: mail.mails(for: action, note: note)) else {
            throw AppError(.gone, title: Phrase("moderation.errors.gone.title"), message: Phrase("moderation.errors.gone"))
        }
        // What others see changes on every instance: open pages, cached lists and posts, sessions.
        switch action {
        case .removePost, .suspendUser: posts.withdrawn(postIDs: outcome.postIDs)
        case .restore, .approve, .unsuspend: try await posts.reinstated(postIDs: outcome.postIDs)
        case .dismiss, .warn, .role, .blocked: break
        }
        if let userId = report.userId, action.coversThePerson {
            signIn.sessions.forgetCachedSignIns(of: userId)
            if action == .suspendUser { try await signIn.endSessions(of: userId) }
        }
        metrics.moderation(action)
        outbox.nudge()
        return outcome
    }

    struct ActionJSON: Encodable {
        let action: String
        let resolvedReports: Int
        let logEntry: LogEntryJSON

        init(_ outcome: ModerationOutcome, in language: Language) {
            (action, resolvedReports, logEntry) = (outcome.entry.action.rawValue, outcome.resolved, LogEntryJSON(outcome.entry, in: language))
        }
    }

    // MARK: Reading reports

    struct ReportRecordJSON: Encodable {
        struct Person: Encodable {
            let id: Int64
            let name: String
        }

        struct Kept: Encodable {
            let title: String?
            let content: String?
            let pictureAlt: String?
            /// `GET` it with the moderator's session; null when the post had no picture.
            let pictureURL: String?

            enum CodingKeys: String, CodingKey {
                case title, content, pictureAlt, pictureURL = "picture_url"
            }

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(title, forKey: .title)
                try container.encode(content, forKey: .content)
                try container.encode(pictureAlt, forKey: .pictureAlt)
                try container.encode(pictureURL, forKey: .pictureURL)
            }
        }

        let id: Int64
        let status: String
        let reason: String
        let comment: String
        let postId: Int64?
        /// `shown`, `removed`, `held` or `deleted`; null for a report about a person.
        let postState: String?
        let reporter: Person?
        let reported: Person?
        let reportedSuspended: Bool
        let kept: Kept
        let createdAt: Date
        let resolvedAt: Date?

        init(_ record: ReportRecord) {
            let report = record.report
            (id, status, reason, comment, postId) = (report.id, report.status.rawValue, report.reason.rawValue, report.comment, report.postId)
            postState = report.postId.map { _ in
                switch record.postState {
                case nil: "deleted"
                case .shown?: "shown"
                case .hidden(let hidden)?: hidden.rawValue
                }
            }
            reporter = zip(report.reporterId, record.reporterName).map(Person.init)
            reported = zip(report.userId, record.reportedName).map(Person.init)
            reportedSuspended = record.reportedSuspended
            kept = Kept(
                title: report.keptTitle, content: report.keptContent, pictureAlt: report.keptPictureAlt,
                pictureURL: report.keptPictureAlt.map { _ in ModerationController.keptPicturePath(report.id) }
            )
            (createdAt, resolvedAt) = (report.createdAt, report.resolvedAt)
        }

        enum CodingKeys: String, CodingKey {
            case id, status, reason, comment, postId, postState, reporter, reported, reportedSuspended, kept, createdAt, resolvedAt
        }

        /// Nulls written out: a client need not tell absent from empty.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(status, forKey: .status)
            try container.encode(reason, forKey: .reason)
            try container.encode(comment, forKey: .comment)
            try container.encode(postId, forKey: .postId)
            try container.encode(postState, forKey: .postState)
            try container.encode(reporter, forKey: .reporter)
            try container.encode(reported, forKey: .reported)
            try container.encode(reportedSuspended, forKey: .reportedSuspended)
            try container.encode(kept, forKey: .kept)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(resolvedAt, forKey: .resolvedAt)
        }
    }

    @Sendable func reportsJSON(request: Request, context: SignedInContext) async throws -> Response {
        _ = try Self.requireModerator(context)
        let status: Report.Status
        switch request.uri.queryParameters["status"].map(String.init) {
        case nil, "open": status = .open
        case "resolved": status = .resolved
        case _?: throw ValidationFailed(errors: ["status": [Phrase("errors.one_of", ["choices": "open, resolved"])]])
        }
        return .json(try await storage.reports(status: status, limit: Self.queueLimit).map(ReportRecordJSON.init))
    }

    // MARK: The audit log

    struct LogEntryJSON: Encodable {
        let id: Int64
        let action: String
        let moderator: ReportRecordJSON.Person?
        let moderatorName: String
        let reportId: Int64?
        let postId: Int64?
        let userId: Int64?
        /// What the action was on, in the reader's language.
        let target: String
        let note: String
        let createdAt: Date

        init(_ entry: ModerationLogEntry, in language: Language) {
            (id, action, moderatorName, reportId, postId, userId) = (
                entry.id, entry.action.rawValue, entry.moderatorName, entry.reportId, entry.postId, entry.userId
            )
            moderator = entry.moderatorId.map { ReportRecordJSON.Person(id: $0, name: entry.moderatorName) }
            (target, note, createdAt) = (entry.target(in: language), entry.note, entry.createdAt)
        }
    }

    struct AuditView: Sendable {
        struct Line: Sendable {
            let when: TimeView
            let moderator: String
            let action: String
            let target: String
            let note: String
        }

        let lines: [Line]
        let isEmpty: Bool
    }

    @Sendable func auditPage(request: Request, context: SignedInContext) async throws -> Response {
        _ = try Self.requireModerator(context)
        let language = views.language(for: request, context: context)
        let time = ReaderTime(request, language: language)
        let lines = try await storage.auditLog(limit: Self.queueLimit).map {
            AuditView.Line(
                when: time.view(of: $0.createdAt), moderator: $0.moderatorName, action: $0.action.label(in: language), target: $0.target(in: language),
                note: $0.note
            )
        }
        return views.page(
            "moderation/audit", ["title": Phrase("moderation.audit.title"), "audit": AuditView(lines: lines, isEmpty: lines.isEmpty)], request: request,
            context: context
        )
    }

    @Sendable func auditJSON(request: Request, context: SignedInContext) async throws -> Response {
        _ = try Self.requireModerator(context)
        let language = views.language(for: request, context: context)
        return .json(try await storage.auditLog(limit: Self.queueLimit).map { LogEntryJSON($0, in: language) })
    }

    // MARK: Roles

    struct RoleBody: FormOrJSONBody {
        static let expectedJSON = #"{"email": "…", "role": "moderator" | "admin" | "none"}"#
        var email: String?
        var role: String?

        init(fields: [String: String]) {
            (email, role) = (fields["email"], fields["role"])
        }
    }

    /// The person whose role changed (`none`: no role), as `/api/v1/me` names roles.
    struct RoleJSON: Encodable {
        let id: Int64
        let name: String
        let role: String
    }

    @Sendable func roleFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let user = try await setRole(try await request.decodeBody(as: RoleBody.self), admin: context)
        return .json(RoleJSON(id: user.id ?? 0, name: user.name, role: user.role?.rawValue ?? "none"))
    }

    @Sendable func roleFromForm(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        _ = try await setRole(RoleBody(fields: try await request.formFields(limit: 4096)), admin: context)
        return .afterSubmit(request, redirectTo: "/moderation", native: .refresh).flashing(.roleChanged)
    }

    private func setRole(_ body: RoleBody, admin context: SignedInContext) async throws -> User {
        let admin = try Self.requireModerator(context)
        guard admin.role == .admin else {
            throw AppError(.forbidden, title: Phrase("moderation.errors.admins_only.title"), message: Phrase("moderation.errors.admins_only"))
        }
        var role: User.Role?
        switch body.role?.lowercased() {
        case "none": role = nil
        case let name?: 
            guard let known = User.Role(rawValue: name) else { throw ValidationFailed(errors: ["role": [Self.roleChoices]]) }
            role = known
        case nil: throw ValidationFailed(errors: ["role": [Self.roleChoices]])
        }
        guard let email = body.email, !email.isBlank, let user = try await users.setRole(role, email: email), let id = user.id else {
            throw ValidationFailed(errors: ["email": [Phrase("moderation.errors.no_account")]])
        }
        signIn.sessions.forgetCachedSignIns(of: id)
        try await storage.log(ModerationLogEntry(
            moderatorId: admin.id, moderatorName: admin.name, action: .role, reportId: nil, postId: nil, userId: id,
            about: .account(of: user.name), in: views.languages.fallback, note: "role: \(role?.rawValue ?? "none")", createdAt: Date()
        ))
        metrics.moderation(.role)
        return user
    }

    private static let roleChoices = Phrase("errors.one_of", ["choices": "moderator, admin, none"])

    static func requireModerator(_ context: SignedInContext) throws -> User {
        let user = context.identity.user
        guard user.moderates else {
            throw AppError(.forbidden, title: Phrase("moderation.errors.moderators_only.title"), message: Phrase("moderation.errors.moderators_only"))
        }
        return user
    }
}

/// Both present, or nil.
private func zip<A, B>(_ a: A?, _ b: B?) -> (A, B)? {
    guard let a, let b else { return nil }
    return (a, b)
}

/// Read by name without `Mirror` (see PostViews.swift).
extension ModerationController.QueueView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "resolved": resolved
        case "entries": entries
        case "isEmpty": isEmpty
        case "admin": admin
        case "roles": roles
        default: nil
        }
    }
}

extension ModerationController.QueueView.Entry: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "reportId": reportId
        case "subject": subject
        case "postPath": postPath
        case "keptTitle": keptTitle
        case "keptContent": keptContent
        case "keptPictureAlt": keptPictureAlt
        case "keptPicturePath": keptPicturePath
        case "state": state
        case "waiting": waiting
        case "reporterCount": reporterCount
        case "reportedBy": reportedBy
        case "reasons": reasons
        case "comments": comments
        case "actions": actions
        default: nil
        }
    }
}

extension ModerationController.QueueView.Choice: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "value": value
        case "label": label
        case "style": style
        default: nil
        }
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension ModerationController.AuditView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "lines": lines
        case "isEmpty": isEmpty
        default: nil
        }
    }
}

extension ModerationController.AuditView.Line: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "when": when
        case "moderator": moderator
        case "action": action
        case "target": target
        case "note": note
        default: nil
        }
    }
}
