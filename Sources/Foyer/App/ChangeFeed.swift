import NIOConcurrencyHelpers

/// One fan-out of a feature's changes (tasks, posts) to whoever follows them: live pages, push, other instances.
/// Listeners run in the publisher's task, in the order they were added, and must not wait: anything slow they
/// start on their own.
final class ChangeFeed<Change: Sendable>: Sendable {
    enum Event: Sendable {
        case change(Change)
        /// Changes may have been lost (a feed or the cluster reconnected): whoever shows them loads them again.
        case missed
    }

    private let listeners = NIOLockedValueBox<[@Sendable (Event) -> Void]>([])

    func listen(_ listener: @escaping @Sendable (Event) -> Void) {
        listeners.withLockedValue { $0.append(listener) }
    }

    func publish(_ change: Change) { tell(.change(change)) }

    func missed() { tell(.missed) }

    private func tell(_ event: Event) {
        for listener in listeners.withLockedValue({ $0 }) { listener(event) }
    }
}
