import Foundation
import Logging
import NIOConcurrencyHelpers

/// Who is changing tasks in the current task: the user a GraphQL execution runs for. The embedded service's events
/// fire inside that execution, so they know their author.
enum TaskChangeAuthor {
    @TaskLocal static var userID: Int64?
}

/// Authors of changes Foyer made at a remote task server, by task id, for a few seconds: the upstream's event for
/// such a change comes over the task feed, which does not say who made it.
/// Instances sharing a database tell each other, since the one that sends the notification may not be the one
/// that made the change.
final class RecentTaskAuthors: Sendable {
    static let lifetime: TimeInterval = 10
    private let authors = NIOLockedValueBox<[String: (userID: Int64, at: Date)]>([:])
    /// Told of every author learnt from this instance's own mutations.
    private let learnt: @Sendable (_ taskIDs: [String], _ userID: Int64) -> Void

    init(learnt: @escaping @Sendable ([String], Int64) -> Void = { _, _ in }) {
        self.learnt = learnt
    }

    /// Reads the ids in a mutation's answer: every top-level field is a task (`{id, …}`) or a task id (deleteTask).
    func record(answer: Data, userID: Int64, now: Date = Date()) {
        guard let root = try? JSONSerialization.jsonObject(with: answer) as? [String: Any],
            let data = root["data"] as? [String: Any]
        else { return }
        let ids = data.values.compactMap { value -> String? in
            switch value {
            case let task as [String: Any]: Self.id(task["id"])
            default: Self.id(value)
            }
        }
        guard !ids.isEmpty else { return }
        remember(ids, userID: userID, now: now)
        learnt(ids, userID)
    }

    /// Authors another instance learnt.
    func remember(_ ids: [String], userID: Int64, now: Date = Date()) {
        authors.withLockedValue { authors in
            if authors.count > 1024 { authors = authors.filter { now.timeIntervalSince($0.value.at) < Self.lifetime } }
            for id in ids { authors[id] = (userID, now) }
        }
    }

    func author(of taskID: String, now: Date = Date()) -> Int64? {
        authors.withLockedValue { authors in
            guard let known = authors[taskID], now.timeIntervalSince(known.at) < Self.lifetime else { return nil }
            return known.userID
        }
    }

    private static func id(_ value: Any?) -> String? {
        switch value {
        case let string as String: string
        case let number as Int: String(number)
        default: nil
        }
    }
}

/// A task created, changed or deleted, from any source, becomes one message to every user with a device but the
/// one who made the change (UPS addresses a user's devices by alias = user id). The task id rides along for deep
/// links. Messages go through the outbox like registrations.
struct TaskNotifications: Sendable {
    /// UPS takes any number of aliases; this keeps one message's body small.
    static let aliasesPerMessage = 500
    /// How long an upstream event waits for Foyer's own mutation answer to name its author.
    static let authorGrace: Duration = .seconds(1)

    let devices: PushDevices
    let relay: PushRelay
    /// Set with a remote task server: where its events' authors are found.
    let remoteAuthors: RecentTaskAuthors?
    /// With a remote task server every instance hears each event: only the one this says yes to sends it on.
    var speaksForTheUpstream: @Sendable () -> Bool = { true }
    let logger: Logger

    func taskChanged(_ kind: TaskEvents.Kind, _ task: TaskItem) {
        let knownAuthor = TaskChangeAuthor.userID
        Task {
            var author = knownAuthor
            if author == nil, let remoteAuthors {
                try? await Task.sleep(for: Self.authorGrace)
                guard speaksForTheUpstream() else { return }
                author = remoteAuthors.author(of: task.id)
            }
            do {
                let recipients = try await devices.recipients(excluding: author)
                guard !recipients.isEmpty else { return }
                let messages = try stride(from: 0, to: recipients.count, by: Self.aliasesPerMessage).map { start in
                    try Self.message(kind, task, aliases: recipients[start..<min(start + Self.aliasesPerMessage, recipients.count)].map(String.init))
                }
                try await devices.enqueue(messages: messages)
                relay.wake()
            } catch {
                logger.error("Could not queue the notification of task \(task.id): \(error)")
            }
        }
    }

    /// UPS's sender body: `{"message": {"alert", "sound", "user-data"}, "criteria": {"alias": […]}}`.
    static func message(_ kind: TaskEvents.Kind, _ task: TaskItem, aliases: [String]) throws -> Data {
        struct Body: Encodable {
            struct Message: Encodable {
                let alert: String
                let sound = "default"
                let userData: [String: String]
                enum CodingKeys: String, CodingKey { case alert, sound, userData = "user-data" }
            }
            struct Criteria: Encodable { let alias: [String] }
            let message: Message
            let criteria: Criteria
        }
        let (verb, change, path) = switch kind {
        case .added: ("New task", "created", "/tasks/\(task.id)")
        case .updated: ("Task changed", "updated", "/tasks/\(task.id)")
        case .deleted: ("Task deleted", "deleted", "/tasks")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(Body(
            message: .init(alert: "\(verb): \(task.title.prefix(120))", userData: ["taskId": task.id, "change": change, "path": path]),
            criteria: .init(alias: aliases)
        ))
    }
}
