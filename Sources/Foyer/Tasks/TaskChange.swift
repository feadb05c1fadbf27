import Foundation

/// One task created, changed or deleted, whoever saw it first: the embedded service, the remote task server's
/// event feed, or another instance sharing the database. Pages, push notifications, the embedded service's
/// subscriptions and the other instances all hear of it through `TaskChanges`.
struct TaskChange: Codable, Sendable, Equatable {
    /// Named after the subscription field that carries each kind.
    enum Kind: String, Codable, Sendable, CaseIterable {
        case added = "taskAdded"
        case updated = "taskUpdated"
        case deleted = "taskDeleted"
    }

    enum Origin: String, Codable, Sendable {
        /// This instance's embedded task service stored it.
        case embedded
        /// The remote task server's event feed brought it; every instance's own feed brings it alike.
        case upstream
        /// Another instance's embedded service stored it, and told this one.
        case otherInstance
    }

    let kind: Kind
    /// The task as pages show it (after a deletion, as it was).
    let task: TaskItem
    /// The Foyer user who made it, when Foyer made it and knows; push notifications skip them.
    var author: Int64?
    var origin: Origin
}

/// The one fan-out of task changes: pages, push notifications, the embedded service's subscriptions and the
/// other instances listen to it.
typealias TaskChanges = ChangeFeed<TaskChange>
