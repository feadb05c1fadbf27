import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// Task pages for signed-in users. Tasks live in the GraphQL task server; every read and write goes through
/// TaskClient with the caller's upstream credentials.
struct TasksController {
    static let perPage = 20
    let tasks: TaskRepository
    let views: Views
    let credentials: UpstreamCredentialSource
    let roles: RealmRoleSource
    let streams: LiveStreams
    let fragments: TaskFragments
    /// As in the showcase server: deleting a task takes this realm role (when users have realm roles at all).
    static let deletingRole = "admin"

    func addRoutes(to router: FoyerRouter) {
        let router = router.group(context: SignedInContext.self)
        router.get("/tasks", use: index)
        router.get("/tasks.json", use: indexJSON)
        router.get("/tasks/new", use: new)
        router.post("/tasks", use: create)
        router.get("/tasks/{id}", use: show)
        router.get("/tasks/{id}/edit", use: edit)
        router.patch("/tasks/{id}", use: update)
        router.put("/tasks/{id}", use: update)
        router.post("/tasks/{id}/status", use: changeStatus)
        router.delete("/tasks/{id}", use: destroy)
    }

    @Sendable func index(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let paging = try Paging(request, defaultPerPage: Self.perPage)
        let language = views.language(for: request, context: context)
        let position = streams.position(of: .tasks, in: language)
        // One more than a page tells whether there is a next one.
        let read = try await tasks.list(
            first: paging.perPage + 1, after: paging.offset, for: identity, credentials: try await credentials(identity)
        )
        let hasNext = read.value.count > paging.perPage
        let items = Array(read.value.prefix(paging.perPage))
        var values: [String: Any] = [
            "title": Phrase("tasks.index.title"), "tasks": items.map { TaskView($0, in: language) }, "page_number": paging.page,
            "stream_path": streams.path(of: .tasks, in: language), "stream_position": position, "list_id": hasNext ? "tasks-page-\(paging.page)" : "tasks",
        ]
        values["offline_since"] = read.offlineCopyFrom.map(Self.clockTime)
        if paging.page > 1 { values["previous_page"] = paging.page - 1 }
        if hasNext { values["next_page"] = paging.page + 1 }
        return views.page("tasks/index", values, request: request, context: context)
    }

    @Sendable func indexJSON(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let paging = try Paging(request, defaultPerPage: Self.perPage)
        let read = try await tasks.list(first: paging.perPage, after: paging.offset, for: identity, credentials: try await credentials(identity))
        var response = Response.json(read.value)
        // Native screens can show their own offline banner from this.
        if let copy = read.offlineCopyFrom { response.headers[.xOfflineCopyFrom] = copy.formatted(.iso8601) }
        return response
    }

    @Sendable func show(request: Request, context: SignedInContext) async throws -> Response {
        let language = views.language(for: request, context: context)
        let position = streams.position(of: .tasks, in: language)
        let (task, offlineCopyFrom) = try await find(context)
        var values: [String: Any] = [
            "title": task.title, "task": TaskView(task, in: language), "stream_path": streams.path(of: .tasks, in: language), "stream_position": position,
        ]
        values["may_delete"] = try await mayDelete(context.identity)
        values["offline_since"] = offlineCopyFrom.map(Self.clockTime)
        return views.page("tasks/show", values, request: request, context: context)
    }

    @Sendable func new(request: Request, context: SignedInContext) async throws -> Response {
        return form(request: request, context: context, fields: TaskFields(title: "", description: "", status: "OPEN"), task: nil)
    }

    @Sendable func create(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let fields = try await TaskFields.read(request)
        if let errors = fields.errors {
            return form(request: request, context: context, fields: fields, task: nil, errors: errors, status: .unprocessableContent)
        }
        let task = try await tasks.create(title: fields.title, description: fields.description, status: fields.status, credentials: try await credentials(identity))
        return .afterSubmit(request, redirectTo: "/tasks/\(task.id)", native: .refresh).flashing(.taskCreated)
    }

    @Sendable func edit(request: Request, context: SignedInContext) async throws -> Response {
        let (task, _) = try await find(context)
        let fields = TaskFields(title: task.title, description: task.description, status: task.status ?? "OPEN", version: task.version)
        return form(request: request, context: context, fields: fields, task: task)
    }

    /// Sends the version the form was rendered with; a stale one is a 409 page with both versions.
    @Sendable func update(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let id = try context.parameters.require("id")
        let fields = try await TaskFields.read(request)
        let current = TaskItem(id: id, version: fields.version, title: fields.title, description: fields.description, status: fields.status)
        if let errors = fields.errors {
            return form(request: request, context: context, fields: fields, task: current, errors: errors, status: .unprocessableContent)
        }
        do {
            guard try await tasks.update(
                id, version: fields.version ?? 0, title: fields.title, description: fields.description, status: fields.status,
                credentials: try await credentials(identity)
            ) != nil else { throw Self.notFound(id) }
        } catch let conflict as TaskConflict {
            return conflictPage(request: request, context: context, server: conflict.server, mine: current)
        }
        return .afterSubmit(request, redirectTo: "/tasks/\(id)", native: .refresh).flashing(.taskSaved)
    }

    /// The list's status buttons: only the status changes, at the version the list showed.
    @Sendable func changeStatus(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let id = try context.parameters.require("id")
        var request = request
        let form = try await request.formFields()
        guard let status = form["status"], TaskItem.statuses.contains(status), let version = form["version"].flatMap(Int.init) else {
            throw AppError(.unprocessableContent, message: Phrase("tasks.errors.status_and_version"))
        }
        let updated: TaskItem
        do {
            guard let task = try await tasks.update(id, version: version, title: nil, description: nil, status: status, credentials: try await credentials(identity))
            else { throw Self.notFound(id) }
            updated = task
        } catch let conflict as TaskConflict {
            let mine = TaskItem(id: id, version: version, title: conflict.server.title, description: conflict.server.description, status: status)
            return conflictPage(request: request, context: context, server: conflict.server, mine: mine)
        }
        if request.wantsTurboStream { return .turboStream(fragments.updated(updated, in: views.language(for: request, context: context))) }
        return Response.seeOther("/tasks").flashing(.taskSaved)
    }

    @Sendable func destroy(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let id = try context.parameters.require("id")
        guard try await mayDelete(identity) else {
            throw AppError(.forbidden, title: Phrase("tasks.errors.not_allowed.title"), message: Phrase("tasks.errors.not_allowed", ["role": Self.deletingRole]))
        }
        guard try await tasks.delete(id: id, for: identity, credentials: try await credentials(identity)) else { throw Self.notFound(id) }
        if request.wantsTurboStream { return .turboStream(fragments.deleted(id: id, in: views.language(for: request, context: context))) }
        return .afterSubmit(request, redirectTo: "/tasks", native: .recede).flashing(.taskDeleted)
    }

    private func mayDelete(_ identity: Identity) async throws -> Bool {
        guard let held = try await roles(identity) else { return true }
        return held.contains(Self.deletingRole)
    }

    /// The task and, when the server was unreachable, the time of the offline copy shown instead.
    private func find(_ context: SignedInContext) async throws -> (TaskItem, Date?) {
        let identity = context.identity
        let id = try context.parameters.require("id")
        let read = try await tasks.get(id: id, for: identity, credentials: try await credentials(identity))
        guard let task = read.value else { throw Self.notFound(id) }
        return (task, read.offlineCopyFrom)
    }

    /// "16:34 UTC": when the offline copy was made.
    static func clockTime(_ date: Date) -> String {
        let components = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: date)
        return String(format: "%02d:%02d UTC", components.hour ?? 0, components.minute ?? 0)
    }

    private func form(
        request: Request, context: SignedInContext, fields: TaskFields, task: TaskItem?,
        errors: ValidationFailed? = nil, status: HTTPResponse.Status = .ok
    ) -> Response {
        var values: [String: Any] = [
            "title": task == nil ? Phrase("tasks.new.title") : Phrase("tasks.edit.title"),
            "form_page": true,
            "form": fields.view(action: task.map { "/tasks/\($0.id)" } ?? "/tasks", editing: task != nil, errors: errors, in: views.language(for: request, context: context)),
        ]
        if let errors {
            values["has_errors"] = true
            values["errors"] = errors.fullMessages(in: views.language(for: request, context: context))
        }
        return views.page(task == nil ? "tasks/new" : "tasks/edit", values, request: request, context: context, status: status)
    }

    /// 409: what the server has now beside what was sent, and the form again at the server's version,
    /// so submitting it once more applies the user's changes on top of the latest.
    private func conflictPage(request: Request, context: SignedInContext, server: TaskItem, mine: TaskItem) -> Response {
        let retry = TaskFields(title: mine.title, description: mine.description, status: mine.status ?? "OPEN", version: server.version)
        let language = views.language(for: request, context: context)
        func side(_ task: TaskItem) -> ConflictView.Side {
            let view = TaskView(task, in: language)
            return .init(title: view.title, detail: view.statusLabel, bodyHTML: "<p class=\"task-description\">\(HTML.escape(view.description))</p>")
        }
        // The task server's conflict says what it holds now, not who saved it or when.
        let conflict = ConflictView(record: .task, savedBy: nil, savedAt: nil, theirs: side(server), yours: side(mine))
        return views.page(
            "tasks/conflict",
            [
                "title": conflict.title, "form_page": true, "conflict": conflict,
                "form": retry.view(action: "/tasks/\(server.id)", editing: true, in: views.language(for: request, context: context)),
            ],
            request: request, context: context, status: .conflict
        )
    }

    static func notFound(_ id: String) -> AppError {
        AppError(.notFound, title: Phrase("tasks.not_found.title"), message: Phrase("tasks.not_found.message", ["id": id]))
    }
}

/// The task form's fields, read from a urlencoded body and checked before anything is sent upstream.
struct TaskFields {
    var title: String
    var description: String
    var status: String
    var version: Int?

    static func read(_ request: Request) async throws -> TaskFields {
        var request = request
        let form = try await request.formFields()
        return TaskFields(
            title: form["title"] ?? "", description: form["description"] ?? "", status: form["status"] ?? "OPEN",
            version: form["version"].flatMap(Int.init)
        )
    }

    /// What is wrong, by field; nil when nothing is.
    var errors: ValidationFailed? {
        var errors: [String: [Phrase]] = [:]
        if title.isBlank { errors["title"] = [Phrase("errors.blank")] }
        if !TaskItem.statuses.contains(status) { errors["status"] = [Phrase("errors.one_of", ["choices": TaskItem.statuses.joined(separator: ", ")])] }
        return errors.isEmpty ? nil : ValidationFailed(errors: errors)
    }

    func view(action: String, editing: Bool, errors: ValidationFailed? = nil, in language: Language) -> TaskFormView {
        let fieldErrors = errors?.errors ?? [:]
        return TaskFormView(
            action: action, editing: editing, version: version ?? 0,
            title: FormField("title", value: title, errors: fieldErrors, in: language),
            description: FormField("description", value: description, errors: fieldErrors, in: language),
            status: FormField("status", value: status, errors: fieldErrors, in: language),
            statuses: TaskItem.statuses.map { TaskFormView.Status(value: $0, label: TaskView.label($0, in: language), selected: $0 == status) }
        )
    }
}

/// The task form (`tasks/form`): where it goes, the version it was read at, and each field with what is wrong with it.
struct TaskFormView: Sendable {
    struct Status: Sendable {
        let value: String
        let label: String
        let selected: Bool
    }

    let action: String
    let editing: Bool
    let version: Int
    let title: FormField
    let description: FormField
    let status: FormField
    /// The choices of the status field, the current one selected.
    let statuses: [Status]
}

/// Read by name without `Mirror` (see PostViews.swift).
extension TaskFormView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "action": action
        case "editing": editing
        case "version": version
        case "title": title
        case "description": description
        case "status": status
        case "statuses": statuses
        default: nil
        }
    }
}

extension TaskFormView.Status: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "value": value
        case "label": label
        case "selected": selected
        default: nil
        }
    }
}
