import Foundation
import NIOConcurrencyHelpers

/// The embedded task service's subscription feed: each open subscription gets its own stream of the task changes
/// it asked for, made here or on another instance sharing the database.
final class TaskEvents: Sendable {
    /// A subscriber that stops reading keeps only the newest events, so it cannot grow memory without bound.
    static let bufferedEventsPerSubscriber = 100

    private let subscribers = NIOLockedValueBox<[UUID: (kind: TaskChange.Kind, continuation: AsyncStream<TaskRecord>.Continuation)]>([:])

    init(following changes: TaskChanges) {
        changes.listen { [weak self] event in
            guard case .change(let change) = event, change.origin != .upstream else { return }
            self?.deliver(change)
        }
    }

    func stream(of kind: TaskChange.Kind) -> AsyncStream<TaskRecord> {
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

    private func deliver(_ change: TaskChange) {
        let receivers = subscribers.withLockedValue { $0.values.filter { $0.kind == change.kind }.map(\.continuation) }
        guard !receivers.isEmpty else { return }
        let task = TaskRecord(change.task)
        for receiver in receivers { receiver.yield(task) }
    }

    var subscriberCount: Int { subscribers.withLockedValue { $0.count } }
}
