import NIOConcurrencyHelpers
import NIOCore

/// One stream's recent events and the subscribers waiting for the next one. The window of recent events is both
/// the replay buffer for reconnects and every subscriber's buffer: an event is stored once, and subscribers keep
/// only a cursor into it. Publishing wakes every waiting subscriber; each then writes the same bytes.
final class LiveChannel: Sendable {
    struct Limits: Sendable {
        /// Events kept for replay: at most this many …
        var window = 1_000
        /// … and none older than this.
        var maxAge: Duration = .seconds(300)
        /// How far a subscriber may fall behind before it is dropped (it reconnects and replays).
        var subscriberBuffer = 64
    }

    enum Next: Sendable {
        /// The one payload after the cursor (the usual case: no array to allocate per subscriber), and its number.
        case event(ByteBuffer, sequence: UInt64)
        /// The payloads after the cursor, oldest first, and the sequence number of the last one.
        case events([ByteBuffer], through: UInt64)
        /// The cursor is older than the window: what came between is lost.
        case gap(latest: UInt64)
        /// The subscriber is more than `subscriberBuffer` events behind.
        case lagging
        case heartbeat
        case closed
        /// The waiting task was cancelled.
        case cancelled
        /// This subscriber was ended (its session ended).
        case ended
    }

    private enum Wakeup: Sendable { case data, heartbeat, closed, cancelled, ended }

    private struct Event {
        let sequence: UInt64
        let payload: ByteBuffer
        let at: ContinuousClock.Instant
    }

    private struct State {
        var events = CircularBuffer<Event>()
        var latest: UInt64 = 0
        /// By a number of their own, so that a cancelled one can be taken out alone.
        var waiters: [UInt64: CheckedContinuation<Wakeup, Never>] = [:]
        var lastWaiterID: UInt64 = 0
        var subscribers = 0
        var closed = false
        var lastSubscriberID: UInt64 = 0
        /// Subscribers ended from outside, and each subscriber's latest wait (a finished wait's number is left
        /// behind rather than taken out on every wake-up: wait numbers are never reused, so it finds no waiter).
        var endedSubscribers = Set<UInt64>()
        var waitOfSubscriber: [UInt64: UInt64] = [:]
    }

    let limits: Limits
    private let state = NIOLockedValueBox(State())

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// The sequence number of the newest event (0 before the first).
    var latest: UInt64 { state.withLockedValue { $0.latest } }

    var subscriberCount: Int { state.withLockedValue { $0.subscribers } }

    /// Appends an event made from its sequence number (so the payload can carry its own id) and wakes every waiter.
    @discardableResult
    func publish(_ payload: (UInt64) -> ByteBuffer) -> UInt64 {
        let now = ContinuousClock.now
        let (waiters, sequence) = state.withLockedValue { state in
            state.latest += 1
            state.events.append(Event(sequence: state.latest, payload: payload(state.latest), at: now))
            Self.prune(&state, limits: limits, now: now)
            return (Self.takeWaiters(&state), state.latest)
        }
        for waiter in waiters { waiter.resume(returning: .data) }
        return sequence
    }

    /// What follows `cursor`, waiting for it when there is nothing yet. `maxLag` nil allows any replay from the window.
    /// `subscriber`: the number `subscribed` gave, so that `end(subscriber:)` can stop it.
    func next(after cursor: UInt64, maxLag: Int? = nil, subscriber: UInt64? = nil) async -> Next {
        while true {
            // Either what is ready, or a number for the wait: one trip through the lock.
            let ready: Next?
            let id: UInt64
            (ready, id) = state.withLockedValue { state in
                if let subscriber, state.endedSubscribers.contains(subscriber) { return (.ended, 0) }
                if let ready = Self.collect(after: cursor, maxLag: maxLag, state) { return (ready, 0) }
                state.lastWaiterID += 1
                return (nil, state.lastWaiterID)
            }
            if let ready { return ready }
            let wakeup = await withTaskCancellationHandler {
                await withCheckedContinuation { (waiter: CheckedContinuation<Wakeup, Never>) in
                    // Under the lock the cancellation handler takes too: a cancellation either comes before (seen
                    // here) or finds the waiter registered.
                    let wakeNow: Wakeup? = state.withLockedValue { state in
                        if Task.isCancelled { return .cancelled }
                        guard !state.closed, state.latest <= cursor else { return .data }
                        if let subscriber {
                            if state.endedSubscribers.contains(subscriber) { return .ended }
                            state.waitOfSubscriber[subscriber] = id
                        }
                        state.waiters[id] = waiter
                        return nil
                    }
                    if let wakeNow { waiter.resume(returning: wakeNow) }
                }
            } onCancel: {
                state.withLockedValue { $0.waiters.removeValue(forKey: id) }?.resume(returning: .cancelled)
            }
            switch wakeup {
            case .data: continue
            case .heartbeat: return .heartbeat
            case .closed: return .closed
            case .cancelled: return .cancelled
            case .ended: return .ended
            }
        }
    }

    /// Wakes every waiting subscriber so it can write a keep-alive; old events leave the window meanwhile.
    func heartbeat() {
        let waiters = state.withLockedValue { state in
            Self.prune(&state, limits: limits, now: .now)
            return Self.takeWaiters(&state)
        }
        for waiter in waiters { waiter.resume(returning: .heartbeat) }
    }

    /// Ends every subscription, now and from now on (graceful shutdown).
    func close() {
        let waiters = state.withLockedValue { state in
            state.closed = true
            return Self.takeWaiters(&state)
        }
        for waiter in waiters { waiter.resume(returning: .closed) }
    }

    /// Ends one subscriber: its wait, now or next, answers `.ended`.
    func end(subscriber: UInt64) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Wakeup, Never>? in
            state.endedSubscribers.insert(subscriber)
            return state.waitOfSubscriber.removeValue(forKey: subscriber).flatMap { state.waiters.removeValue(forKey: $0) }
        }
        waiter?.resume(returning: .ended)
    }

    /// Counts a subscriber in for the length of `body`, which gets the subscriber's number.
    func subscribed<Value>(_ body: (_ subscriber: UInt64) async throws -> Value) async rethrows -> Value {
        let subscriber = state.withLockedValue { state in
            state.subscribers += 1
            state.lastSubscriberID += 1
            return state.lastSubscriberID
        }
        defer {
            state.withLockedValue { state in
                state.subscribers -= 1
                state.endedSubscribers.remove(subscriber)
                state.waitOfSubscriber.removeValue(forKey: subscriber)
            }
        }
        return try await body(subscriber)
    }

    private static func takeWaiters(_ state: inout State) -> [CheckedContinuation<Wakeup, Never>] {
        let waiters = Array(state.waiters.values)
        state.waiters.removeAll(keepingCapacity: true)
        return waiters
    }

    private static func collect(after cursor: UInt64, maxLag: Int?, _ state: State) -> Next? {
        if state.closed { return .closed }
        guard cursor < state.latest else { return nil }
        let first = state.events.first?.sequence ?? state.latest + 1
        if cursor + 1 < first { return .gap(latest: state.latest) }
        if let maxLag, state.latest - cursor > UInt64(maxLag) { return .lagging }
        let start = state.events.index(state.events.startIndex, offsetBy: Int(cursor + 1 - first))
        if cursor + 1 == state.latest { return .event(state.events[start].payload, sequence: state.latest) }
        return .events(state.events[start...].map(\.payload), through: state.latest)
    }

    private static func prune(_ state: inout State, limits: Limits, now: ContinuousClock.Instant) {
        while let oldest = state.events.first, state.events.count > limits.window || now - oldest.at > limits.maxAge {
            state.events.removeFirst()
        }
    }
}
