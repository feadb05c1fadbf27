import Foundation
import Logging

/// A task created, changed or deleted, from any source, becomes one message to every user with a device but the
/// one who made the change (UPS addresses a user's devices by alias = user id). The task id rides along for deep
/// links. Messages go through the outbox like registrations.
struct TaskNotifications: Sendable {
    /// UPS takes any number of aliases; this keeps one message's body small.
    static let aliasesPerMessage = 500
    /// How long an upstream event waits for Foyer's own mutation answer to name its author.
    static let authorGrace: Duration = .seconds(1)

    let devices: PushDeviceRepository
    let relay: PushRelay
    /// Who made Foyer's own changes: a remote task server's events are matched to them by task id.
    let authors: TaskAuthors
    /// With a remote task server every instance hears each event: only the one this says yes to sends it on.
    var speaksForTheUpstream: @Sendable () -> Bool = { true }
    let logger: Logger

    func follow(_ changes: TaskChanges) {
        changes.listen { event in
            // Another instance's change is sent from there; a missed one cannot be told.
            guard case .change(let change) = event, change.origin != .otherInstance else { return }
            taskChanged(change)
        }
    }

    func taskChanged(_ change: TaskChange) {
        let task = change.task
        Task {
            var author = change.author
            if change.origin == .upstream {
                // The upstream's event may come before Foyer's own mutation answer named its author.
                try? await Task.sleep(for: Self.authorGrace)
                guard speaksForTheUpstream() else { return }
                author = authors.author(of: task.id)
            }
            do {
                let recipients = try await devices.recipients(excluding: author)
                guard !recipients.isEmpty else { return }
                let messages = try stride(from: 0, to: recipients.count, by: Self.aliasesPerMessage).map { start in
                    try Self.message(change.kind, task, aliases: recipients[start..<min(start + Self.aliasesPerMessage, recipients.count)].map(String.init))
                }
                try await devices.enqueue(messages: messages)
                relay.wake()
            } catch {
                logger.error("Could not queue the notification of task \(task.id): \(error)")
            }
        }
    }

    /// UPS's sender body: `{"message": {"alert", "sound", "user-data"}, "criteria": {"alias": […]}}`.
    static func message(_ kind: TaskChange.Kind, _ task: TaskItem, aliases: [String]) throws -> Data {
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
