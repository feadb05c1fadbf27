import NIOConcurrencyHelpers
import NIOCore

/// One stream's recent events and its subscribers. The window of recent events is both the replay buffer for
/// reconnects and every subscriber's buffer: an event is stored once, and subscribers keep only a cursor into it.
/// A subscriber either waits on its own task for what comes `next`, or is followed on its connection: then a
/// publish hops once to each event loop that has such subscribers and there writes the same bytes to each of its
/// connections, waking no task of theirs (`follow`). An event may name its author: a follower kept apart from them by
/// a block (`Follower.keptApart`) is not sent it, and moves past it all the same.
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

    /// A subscriber's connection, written to from its event loop.
    struct Connection: Sendable {
        /// How an event's bytes are framed before `write` gets them. Connections whose framings have the same key
        /// frame alike (a stream's HTTP chunk, a subscription's websocket frame with the same id) and have the same
        /// heartbeat, so a fan-out frames each event once per key, not once per connection.
        struct Framing: Sendable {
            let key: String
            let frame: @Sendable (ByteBuffer) -> ByteBuffer
        }

        let channel: any Channel
        /// Writes (without flushing) an event's bytes as the connection's pipeline takes them: an HTTP body part,
        /// a websocket frame, a framed chunk.
        let write: @Sendable (ByteBuffer) -> Void
        /// Flushes what `write` wrote: by default the channel, through its whole pipeline.
        let flush: @Sendable () -> Void
        /// Written on every heartbeat, so that proxies and browsers keep an idle connection; nil: nothing.
        let heartbeat: ByteBuffer?
        /// nil: written as published.
        let framing: Framing?

        init(
            channel: any Channel, write: @escaping @Sendable (ByteBuffer) -> Void, flush: (@Sendable () -> Void)? = nil, heartbeat: ByteBuffer?,
            framing: Framing? = nil
        ) {
            self.channel = channel
            self.write = write
            self.flush = flush ?? { channel.flush() }
            self.heartbeat = heartbeat
            self.framing = framing
        }
    }

    /// Why following a connection ended.
    enum Ending: Sendable {
        /// The server is shutting down.
        case closed
        /// This subscriber was ended (its session ended).
        case ended
        /// The connection stopped taking what was written, or events were lost on the way: it reconnects and replays.
        case lagging
        /// The connection closed.
        case gone
        /// The following task was cancelled.
        case cancelled
    }

    private struct Event {
        let sequence: UInt64
        let payload: ByteBuffer
        let at: ContinuousClock.Instant
        /// Whose words it carries; nil: nobody's in particular, sent to every follower.
        let author: Int64?
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
        /// Followed connections, by event loop, and where each followed subscriber is.
        var loops: [ObjectIdentifier: LoopSubscribers] = [:]
        var loopOfSubscriber: [UInt64: LoopSubscribers] = [:]
        /// Followed subscribers whose task was cancelled before their loop took them in.
        var cancelledSubscribers = Set<UInt64>()
    }

    let limits: Limits
    private let state = NIOLockedValueBox(State())

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// The sequence number of the newest event (0 before the first).
    var latest: UInt64 { state.withLockedValue { $0.latest } }

    var subscriberCount: Int { state.withLockedValue { $0.subscribers } }

    /// Subscribers waiting in `next` for an event, a heartbeat or the close.
    var waitingCount: Int { state.withLockedValue { $0.waiters.count } }

    /// Subscribers whose connection its event loop has taken in (`follow`) and writes to.
    var followedCount: Int { state.withLockedValue { $0.loopOfSubscriber.count } }

    /// Appends an event made from its sequence number (so the payload can carry its own id) and wakes every waiter.
    @discardableResult
    func publish(_ payload: (UInt64) -> ByteBuffer, author: Int64? = nil) -> UInt64 {
        append(number: { state in state.latest + 1 }, payload: payload, author: author)
    }

    /// Appends an event numbered elsewhere (a journal shared by instances); nil when `sequence` is not after the
    /// latest (it is here already). A number further on means the events between were lost here: the window
    /// starts again from it, and whoever is behind it reconnects and reloads.
    @discardableResult
    func publish(_ payload: ByteBuffer, sequence: UInt64, author: Int64? = nil) -> UInt64? {
        let appended = append(
            number: { state in
                guard sequence > state.latest else { return nil }
                if sequence > state.latest + 1 { state.events.removeAll(keepingCapacity: true) }
                return sequence
            },
            payload: { _ in payload }, author: author
        )
        return appended == 0 ? nil : appended
    }

    /// Takes a window kept elsewhere (the journal, at start), oldest first, each with its age, and the latest
    /// number, which may be past the last of them (its events left the window). Only before anything is published.
    func load(_ events: [(sequence: UInt64, payload: ByteBuffer, age: Duration, author: Int64?)], latest: UInt64) {
        let now = ContinuousClock.now
        state.withLockedValue { state in
            precondition(state.latest == 0, "a window is loaded before anything is published")
            state.events = CircularBuffer(events.map { Event(sequence: $0.sequence, payload: $0.payload, at: now - $0.age, author: $0.author) })
            state.latest = max(latest, events.last?.sequence ?? 0)
            Self.prune(&state, limits: limits, now: now)
        }
    }

    /// 0: nothing appended (`number` said no).
    private func append(number: (inout State) -> UInt64?, payload: (UInt64) -> ByteBuffer, author: Int64?) -> UInt64 {
        let now = ContinuousClock.now
        let appended: (waiters: [CheckedContinuation<Wakeup, Never>], loops: [LoopSubscribers], sequence: UInt64)? = state.withLockedValue { state in
            guard let sequence = number(&state) else { return nil }
            state.latest = sequence
            state.events.append(Event(sequence: sequence, payload: payload(sequence), at: now, author: author))
            Self.prune(&state, limits: limits, now: now)
            return (Self.takeWaiters(&state), Array(state.loops.values), sequence)
        }
        guard let appended else { return 0 }
        for waiter in appended.waiters { waiter.resume(returning: .data) }
        for loop in appended.loops { loop.eventLoop.execute { loop.deliver() } }
        return appended.sequence
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

    /// What follows `cursor` now, without waiting: nil when nothing does. Events by the authors in `excluding` are
    /// left out (the cursor still moves past them).
    func available(after cursor: UInt64, excluding: Set<Int64> = []) -> Next? {
        state.withLockedValue { Self.collect(after: cursor, maxLag: nil, excluding: excluding, $0) }
    }

    /// Writes every event after `cursor` to `connection` as it is published, from the connection's event loop, until
    /// the connection closes or falls behind, the subscriber is ended, the server shuts down, or the task is cancelled.
    /// `subscriber`: the number `subscribed` gave.
    func follow(_ connection: Connection, after cursor: UInt64, subscriber: UInt64, keptApart: Set<Int64> = []) async -> Ending {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (ending: CheckedContinuation<Ending, Never>) in
                follow(connection, after: cursor, subscriber: subscriber, keptApart: keptApart) { ending.resume(returning: $0) }
            }
        } onCancel: {
            state.withLockedValue { _ = $0.cancelledSubscribers.insert(subscriber) }
            stop(subscriber: subscriber, on: connection.channel.eventLoop, .cancelled)
        }
    }

    /// `follow` without a task waiting on it: `ended` is called once, on the connection's event loop, when following
    /// stops and why. What holds the subscriber (its number from `subscribe`) lets it go there. `keptApart`: the
    /// authors whose events it is not sent.
    func follow(
        _ connection: Connection, after cursor: UInt64, subscriber: UInt64, keptApart: Set<Int64> = [], ended: @escaping @Sendable (Ending) -> Void
    ) {
        let eventLoop = connection.channel.eventLoop
        let loop = loop(of: eventLoop)
        eventLoop.execute {
            loop.add(LoopSubscribers.Follower(id: subscriber, connection: connection, cursor: cursor, keptApart: keptApart, ending: ended))
        }
    }

    /// A followed subscriber's blocks changed: from the next event on it is kept apart from `keptApart`, and it is
    /// sent `notice` made for its cursor (framed as its connection frames events) so that it loads again what it shows.
    func keepApart(subscriber: UInt64, on eventLoop: any EventLoop, from keptApart: Set<Int64>, notice: @escaping @Sendable (UInt64) -> ByteBuffer) {
        let loop = loop(of: eventLoop)
        eventLoop.execute { loop.keepApart(subscriber, from: keptApart, notice: notice) }
    }

    /// Stops following one subscriber on `eventLoop` (if it is followed there) with `ending`.
    func stop(subscriber: UInt64, on eventLoop: any EventLoop, _ ending: Ending) {
        let loop = loop(of: eventLoop)
        eventLoop.execute { loop.finish(subscriber, ending) }
    }

    private func loop(of eventLoop: any EventLoop) -> LoopSubscribers {
        state.withLockedValue { state in
            let key = ObjectIdentifier(eventLoop)
            if let loop = state.loops[key] { return loop }
            let loop = LoopSubscribers(owner: self, eventLoop: eventLoop, delivered: state.latest)
            state.loops[key] = loop
            return loop
        }
    }

    /// Wakes every waiting subscriber so it can write a keep-alive, and writes one to every followed connection;
    /// old events leave the window meanwhile.
    func heartbeat() {
        let (waiters, loops) = state.withLockedValue { state in
            Self.prune(&state, limits: limits, now: .now)
            return (Self.takeWaiters(&state), Array(state.loops.values))
        }
        for waiter in waiters { waiter.resume(returning: .heartbeat) }
        for loop in loops { loop.eventLoop.execute { loop.heartbeat() } }
    }

    /// Ends every subscription, now and from now on (graceful shutdown).
    func close() {
        let (waiters, loops) = state.withLockedValue { state in
            state.closed = true
            return (Self.takeWaiters(&state), Array(state.loops.values))
        }
        for waiter in waiters { waiter.resume(returning: .closed) }
        for loop in loops { loop.eventLoop.execute { loop.finishAll(.closed) } }
    }

    /// Ends one subscriber: its wait, now or next, answers `.ended`, and so does its following.
    func end(subscriber: UInt64) {
        let (waiter, loop) = state.withLockedValue { state -> (CheckedContinuation<Wakeup, Never>?, LoopSubscribers?) in
            state.endedSubscribers.insert(subscriber)
            let waiter = state.waitOfSubscriber.removeValue(forKey: subscriber).flatMap { state.waiters.removeValue(forKey: $0) }
            return (waiter, state.loopOfSubscriber[subscriber])
        }
        waiter?.resume(returning: .ended)
        if let loop { loop.eventLoop.execute { loop.finish(subscriber, .ended) } }
    }

    /// Counts a subscriber in for the length of `body`, which gets the subscriber's number.
    func subscribed<Value>(_ body: (_ subscriber: UInt64) async throws -> Value) async rethrows -> Value {
        let subscriber = subscribe()
        defer { unsubscribe(subscriber) }
        return try await body(subscriber)
    }

    /// Counts a subscriber in until `unsubscribe`, and gives its number.
    func subscribe() -> UInt64 {
        state.withLockedValue { state in
            state.subscribers += 1
            state.lastSubscriberID += 1
            return state.lastSubscriberID
        }
    }

    func unsubscribe(_ subscriber: UInt64) {
        state.withLockedValue { state in
            state.subscribers -= 1
            state.endedSubscribers.remove(subscriber)
            state.cancelledSubscribers.remove(subscriber)
            state.waitOfSubscriber.removeValue(forKey: subscriber)
        }
    }

    private static func takeWaiters(_ state: inout State) -> [CheckedContinuation<Wakeup, Never>] {
        let waiters = Array(state.waiters.values)
        state.waiters.removeAll(keepingCapacity: true)
        return waiters
    }

    /// `excluding`: authors whose events are left out, so `.events` may be empty (the cursor still moves on).
    private static func collect(after cursor: UInt64, maxLag: Int?, excluding: Set<Int64> = [], _ state: State) -> Next? {
        if state.closed { return .closed }
        guard cursor < state.latest else { return nil }
        let first = state.events.first?.sequence ?? state.latest + 1
        if cursor + 1 < first { return .gap(latest: state.latest) }
        if let maxLag, state.latest - cursor > UInt64(maxLag) { return .lagging }
        let start = state.events.index(state.events.startIndex, offsetBy: Int(cursor + 1 - first))
        if !excluding.isEmpty {
            return .events(state.events[start...].filter { $0.author.map { !excluding.contains($0) } ?? true }.map(\.payload), through: state.latest)
        }
        if cursor + 1 == state.latest { return .event(state.events[start].payload, sequence: state.latest) }
        return .events(state.events[start...].map(\.payload), through: state.latest)
    }

    /// The authors of the last `count` events (those after a cursor `count` behind the latest), oldest first.
    private static func authors(ofLast count: Int, _ state: State) -> [Int64?] {
        state.events.suffix(count).map(\.author)
    }

    private static func prune(_ state: inout State, limits: Limits, now: ContinuousClock.Instant) {
        while let oldest = state.events.first, state.events.count > limits.window || now - oldest.at > limits.maxAge {
            state.events.removeFirst()
        }
    }

    /// The followed connections of one event loop. Everything here runs on that loop, so nothing in it is locked.
    final class LoopSubscribers: @unchecked Sendable {
        /// A class, so that a fan-out updates each follower where it is rather than copying it out and back.
        final class Follower {
            let id: UInt64
            let connection: Connection
            /// The last event written to it.
            var cursor: UInt64
            let ending: @Sendable (Ending) -> Void
            /// Events written while the connection would not take more.
            var unwritable = 0
            /// Authors whose events it is not sent (a block keeps the reader apart from them); empty for most.
            var keptApart: Set<Int64>

            init(id: UInt64, connection: Connection, cursor: UInt64, keptApart: Set<Int64> = [], ending: @escaping @Sendable (Ending) -> Void) {
                self.id = id
                self.connection = connection
                self.cursor = cursor
                self.keptApart = keptApart
                self.ending = ending
            }
        }

        let eventLoop: any EventLoop
        private unowned let owner: LiveChannel
        private var followers: [UInt64: Follower] = [:]
        /// The last event written to every follower here (each follower's cursor is at least this).
        private var delivered: UInt64
        /// Followers here kept apart from someone: a fan-out reads its events' authors only when there are any.
        private var keepingApart = 0

        init(owner: LiveChannel, eventLoop: any EventLoop, delivered: UInt64) {
            self.owner = owner
            self.eventLoop = eventLoop
            self.delivered = delivered
        }

        /// Takes a follower in, first writing what was published since its cursor.
        func add(_ follower: Follower) {
            eventLoop.preconditionInEventLoop()
            let (stopped, next): (Ending?, Next?) = owner.state.withLockedValue { state in
                if state.closed { return (.closed, nil) }
                if state.endedSubscribers.contains(follower.id) { return (.ended, nil) }
                if state.cancelledSubscribers.contains(follower.id) { return (.cancelled, nil) }
                let next = LiveChannel.collect(after: follower.cursor, maxLag: nil, excluding: follower.keptApart, state)
                // What it has not seen already left the window: it reconnects and replays (or reloads).
                if case .gap = next { return (.lagging, nil) }
                state.loopOfSubscriber[follower.id] = self
                if followers.isEmpty { delivered = state.latest }
                return (nil, next)
            }
            if let stopped {
                follower.ending(stopped)
                return
            }
            let frame = follower.connection.framing?.frame ?? { $0 }
            switch next {
            case .event(let payload, let sequence):
                write([frame(payload)], through: sequence, to: follower)
            case .events(let payloads, let through):
                write(payloads.map(frame), through: through, to: follower)
            case nil, .gap, .closed, .lagging, .heartbeat, .cancelled, .ended:
                // Nothing new since its cursor (the window is not closed and has no gap: both were answered above).
                break
            }
            followers[follower.id] = follower
            if !follower.keptApart.isEmpty { keepingApart += 1 }
            let id = follower.id
            // Not at once: a connection can close inside a fan-out's write, which must not see followers change.
            follower.connection.channel.closeFuture.whenComplete { _ in self.eventLoop.execute { self.finish(id, .gone) } }
        }

        /// Writes what was published since the last delivery to every follower, flushing each once. Each event is
        /// framed once for all the followers whose connections frame it alike.
        func deliver() {
            eventLoop.preconditionInEventLoop()
            let (next, authors) = owner.state.withLockedValue { state -> (Next?, [Int64?]) in
                if followers.isEmpty {
                    delivered = state.latest
                    return (nil, [])
                }
                let next = LiveChannel.collect(after: delivered, maxLag: nil, state)
                guard keepingApart > 0, delivered < state.latest else { return (next, []) }
                return (next, LiveChannel.authors(ofLast: Int(state.latest - delivered), state))
            }
            let payloads: [ByteBuffer]
            let through: UInt64
            switch next {
            case .event(let payload, let sequence): (payloads, through) = ([payload], sequence)
            case .events(let all, let last): (payloads, through) = (all, last)
            case .gap:
                // Events left the window before this loop wrote them: every follower here reconnects and replays.
                finishAll(.lagging)
                return
            case nil, .closed, .lagging, .heartbeat, .cancelled, .ended:
                return
            }
            var framed = Framed<[ByteBuffer]>()
            let first = through - UInt64(payloads.count) + 1
            var lagging: [UInt64] = []
            for follower in followers.values {
                // A follower taken in after this delivery was scheduled already has its first events.
                let skipped = follower.cursor >= first ? Int(min(follower.cursor - first + 1, UInt64(payloads.count))) : 0
                if skipped < payloads.count {
                    var frames = payloads
                    if let framing = follower.connection.framing { frames = framed.value(for: framing.key) { payloads.map(framing.frame) } }
                    if follower.keptApart.isEmpty || authors.count != payloads.count {
                        write(frames[skipped...], through: through, to: follower)
                    } else {
                        let sent = (skipped..<frames.count).lazy.filter { authors[$0].map { !follower.keptApart.contains($0) } ?? true }.map { frames[$0] }
                        write(sent, through: through, to: follower)
                    }
                }
                if follower.unwritable > owner.limits.subscriberBuffer { lagging.append(follower.id) }
            }
            delivered = through
            for id in lagging { finish(id, .lagging) }
        }

        /// What one fan-out framed, by framing key. Most loops follow one kind of connection: a short list, searched
        /// by its keys, beats hashing them per follower; a few kept, not one per client that names its own ids.
        private struct Framed<Value> {
            private var kept: [(key: String, value: Value)] = []

            mutating func value(for key: String, framing make: () -> Value) -> Value {
                if let known = kept.first(where: { $0.key == key }) { return known.value }
                let value = make()
                if kept.count < 16 { kept.append((key, value)) }
                return value
            }
        }

        func heartbeat() {
            eventLoop.preconditionInEventLoop()
            var framed = Framed<ByteBuffer>()
            for follower in followers.values {
                guard let heartbeat = follower.connection.heartbeat else { continue }
                if let framing = follower.connection.framing {
                    let frame = framed.value(for: framing.key) { framing.frame(heartbeat) }
                    follower.connection.write(frame)
                } else {
                    follower.connection.write(heartbeat)
                }
                follower.connection.flush()
            }
        }

        /// From the next event on, one follower is kept apart from `keptApart`; `notice` is written to it now.
        func keepApart(_ id: UInt64, from keptApart: Set<Int64>, notice: (UInt64) -> ByteBuffer) {
            eventLoop.preconditionInEventLoop()
            guard let follower = followers[id] else { return }
            keepingApart += (keptApart.isEmpty ? 0 : 1) - (follower.keptApart.isEmpty ? 0 : 1)
            follower.keptApart = keptApart
            let payload = notice(follower.cursor)
            follower.connection.write(follower.connection.framing?.frame(payload) ?? payload)
            follower.connection.flush()
        }

        /// Stops following one subscriber (if it is still followed here) and wakes its task.
        func finish(_ id: UInt64, _ ending: Ending) {
            eventLoop.preconditionInEventLoop()
            guard let follower = followers.removeValue(forKey: id) else { return }
            if !follower.keptApart.isEmpty { keepingApart -= 1 }
            forget(id)
            follower.ending(ending)
        }

        func finishAll(_ ending: Ending) {
            for id in Array(followers.keys) { finish(id, ending) }
        }

        private func forget(_ id: UInt64) {
            owner.state.withLockedValue { _ = $0.loopOfSubscriber.removeValue(forKey: id) }
        }

        private func write<Payloads: Collection<ByteBuffer>>(_ payloads: Payloads, through: UInt64, to follower: Follower) {
            for payload in payloads { follower.connection.write(payload) }
            follower.connection.flush()
            follower.cursor = through
            follower.unwritable = follower.connection.channel.isWritable ? 0 : follower.unwritable + payloads.count
        }
    }
}
