import Foundation
import NIOConcurrencyHelpers

/// The embedded task service's subscription feed: mutations publish, each open subscription gets its own stream.
final class TaskEvents: Sendable {
    enum Kind: String, Sendable, CaseIterable {
        case added = "taskAdded"
        case updated = "taskUpdated"
        case deleted = "taskDeleted"
    }

    /// A subscriber that stops reading keeps only the newest events, so it cannot grow memory without bound.
    static let bufferedEventsPerSubscriber = 100

    private let subscribers = NIOLockedValueBox<[UUID: (kind: Kind, continuation: AsyncStream<TaskRecord>.Continuation)]>([:])

    func stream(of kind: Kind) -> AsyncStream<TaskRecord> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: TaskRecord.self, bufferingPolicy: .bufferingNewest(Self.bufferedEventsPerSubscriber)
        )
        let id = UUID()
        subscribers.withLockedValue { $0[id] = (kind, continuation) }
        continuation.onTermination = { [weak self] _ in
            self?.subscribers.withLockedValue { _ = $0.removeValue(forKey: id) }
        }
        return stream
    }

    /// Handlers called on every event, in the publisher's task: for work that must not lag (live pages).
    /// `relayed`: the change was made on another instance sharing the database, which told this one.
    private let observers = NIOLockedValueBox<[@Sendable (Kind, TaskRecord, _ relayed: Bool) -> Void]>([])

    func observe(_ handler: @escaping @Sendable (Kind, TaskRecord, _ relayed: Bool) -> Void) {
        observers.withLockedValue { $0.append(handler) }
    }

    func publish(_ kind: Kind, _ task: TaskRecord, relayed: Bool = false) {
        for observer in observers.withLockedValue({ $0 }) { observer(kind, task, relayed) }
        let receivers = subscribers.withLockedValue { $0.values.filter { $0.kind == kind }.map(\.continuation) }
        for receiver in receivers { receiver.yield(task) }
    }

    var subscriberCount: Int { subscribers.withLockedValue { $0.count } }
}
