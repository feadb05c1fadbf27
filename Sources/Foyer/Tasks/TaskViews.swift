import Mustache

/// What the task templates show of a task (`tasks/row`, `tasks/content`): the same for every viewer, so a
/// live fragment rendered once serves every open page.
struct TaskView: Sendable {
    /// One segment of the status control: the current status, or a button that sets another.
    struct StatusOption: Sendable {
        let value: String
        let label: String
        let current: Bool
    }

    let id: String
    let title: String
    let description: String
    let status: String
    let statusLabel: String
    /// Kept in forms (a stale edit is told apart by it), never shown.
    let version: Int
    /// The list's status control: all three, the current one marked.
    let statuses: [StatusOption]

    init(_ task: TaskItem, in language: Language) {
        let status = task.status ?? "OPEN"
        id = task.id
        title = task.title
        description = task.description
        self.status = status
        statusLabel = Self.label(status, in: language)
        version = task.version ?? 0
        statuses = TaskItem.statuses.map { StatusOption(value: $0, label: Self.label($0, in: language), current: $0 == status) }
    }

    /// A status as people say it: "Open", "Aberta", "待处理"; one the task server added later, as it spells it.
    static func label(_ status: String, in language: Language) -> String {
        switch status {
        case "OPEN": language.text("tasks.status.open")
        case "ASSIGNED": language.text("tasks.status.assigned")
        case "COMPLETE": language.text("tasks.status.complete")
        default: status.capitalized
        }
    }
}

/// The `<turbo-stream>` HTML that shows a task change on open pages: list rows (`task_ID`) and the detail page
/// (`task_ID_content`, `task_ID_detail`). Pages that show neither ignore it.
struct TaskFragments: Sendable {
    let views: Views

    func added(_ task: TaskItem, in language: Language) -> String {
        TurboStream.append("tasks", views.render("tasks/row", TaskView(task, in: language), in: language))
    }

    func updated(_ task: TaskItem, in language: Language) -> String {
        let view = TaskView(task, in: language)
        return TurboStream.replace("task_\(task.id)", views.render("tasks/row", view, in: language))
            + TurboStream.replace("task_\(task.id)_content", views.render("tasks/content", view, in: language))
    }

    func deleted(id: String, in language: Language) -> String {
        TurboStream.remove("task_\(id)") + TurboStream.replace("task_\(id)_detail", views.render("tasks/deleted", ["id": id], in: language))
    }
}

/// Open task pages follow every task change: each is rendered once and sent to all of them, on every instance
/// through the live journal, by the one instance that heard it first.
struct TaskPages: Sendable {
    let streams: LiveStreams
    let fragments: TaskFragments
    /// With a remote task server, whether this instance speaks for its feed (every instance hears each change, and
    /// one puts it on the pages); nil with the embedded service, whose changes are heard where they are made.
    let speaksForTheUpstream: (@Sendable () -> Bool)?

    func follow(_ changes: TaskChanges) {
        changes.listen { event in
            switch event {
            case .change(let change):
                switch change.origin {
                case .embedded: streams.broadcast(on: .tasks) { html(for: change, in: $0) }
                case .upstream where speaksForTheUpstream?() ?? true: streams.broadcast(on: .tasks) { html(for: change, in: $0) }
                case .upstream, .otherInstance: break
                }
            case .missed:
                // The remote feed was away: changes went by unheard. (Another instance's changes missed while the
                // bus was away are read from the journal.)
                if speaksForTheUpstream?() == true { streams.broadcastReload(on: .tasks) }
            }
        }
    }

    func html(for change: TaskChange, in language: Language) -> String {
        switch change.kind {
        case .added: fragments.added(change.task, in: language)
        case .updated: fragments.updated(change.task, in: language)
        case .deleted: fragments.deleted(id: change.task.id, in: language)
        }
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension TaskView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "title": title
        case "description": description
        case "status": status
        case "statusLabel": statusLabel
        case "version": version
        case "statuses": statuses
        default: nil
        }
    }
}

extension TaskView.StatusOption: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "value": value
        case "label": label
        case "current": current
        default: nil
        }
    }
}
