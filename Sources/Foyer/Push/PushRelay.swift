import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Works through the outbox, oldest first, one call at a time, so UPS hears of a token's changes in the order they
/// were made. When UPS cannot be reached the relay stops at that operation and tries again with backoff (at once
/// when something new is queued); an operation UPS refuses (400, 401) is dropped with a log line saying why.
final class PushRelay: Service, Sendable {
    static let maximumBackoff: Double = 60
    /// Without news the outbox is looked at this often anyway (another process may have queued something).
    static let idlePoll: Duration = .seconds(30)
    /// An operation UPS could not take for this long is given up, and logged.
    static let maximumAge: TimeInterval = 24 * 3600

    /// What became of an operation, for a request that waits to answer 201 or 202: UPS's answer, where
    /// `unavailable` means it is kept in the outbox (UPS is away, or did not answer in time).
    typealias Outcome = UnifiedPushClient.Answer

    let devices: PushDeviceRepository
    let client: UnifiedPushClient
    let logger: Logger
    private let doorbell = Doorbell()
    private let outcomes = Outcomes()
    /// Told of what UPS answered to each operation this relay delivered: with several instances the request
    /// waiting for it may be on another one, whose relay found this one at the outbox.
    private let delivered: @Sendable (_ operation: Int64, Outcome) -> Void

    init(devices: PushDeviceRepository, client: UnifiedPushClient, logger: Logger, delivered: @escaping @Sendable (Int64, Outcome) -> Void = { _, _ in }) {
        self.devices = devices
        self.client = client
        self.logger = logger
        self.delivered = delivered
    }

    /// Another instance's relay delivered this operation.
    func heard(_ operation: Int64, _ outcome: Outcome) {
        outcomes.resolve(operation, outcome)
    }

    /// Something was queued: work through the outbox now.
    func wake() { doorbell.ring() }

    /// Why the last attempt failed, while UPS is failing; nil once it takes operations again.
    private let failing = NIOLockedValueBox<String?>(nil)

    /// Wakes the relay and waits (a bounded time) for what becomes of one operation. While UPS is known to be
    /// failing the answer is "pending" at once: apps need not wait out another failed attempt.
    func outcome(of operation: Int64, waitingUpTo limit: Duration = .seconds(4)) async -> Outcome {
        wake()
        if let reason = failing.withLockedValue({ $0 }) { return .unavailable(reason) }
        return await outcomes.wait(for: operation, upTo: limit) ?? .unavailable("Unified Push has not answered yet")
    }

    func run() async {
        await cancelWhenGracefulShutdown {
            var failures = 0
            while !Task.isCancelled {
                let (reason, busyElsewhere) = await self.deliverQueued()
                self.failing.withLockedValue { $0 = reason }
                if busyElsewhere {
                    await self.doorbell.wait(upTo: Self.otherInstancePoll)
                } else if let reason {
                    failures += 1
                    self.outcomes.resolveAllWaiting(.unavailable(reason))
                    let delay = min(Self.maximumBackoff, pow(2, Double(min(failures - 1, 8)))) * Double.random(in: 0.8...1.2)
                    await self.doorbell.wait(upTo: .milliseconds(Int(delay * 1000)))
                } else {
                    failures = 0
                    await self.doorbell.wait(upTo: Self.idlePoll)
                }
            }
        }
    }

    /// While another instance works through the outbox this one looks again this often (it may just have finished).
    static let otherInstancePoll: Duration = .seconds(1)

    /// Delivers queued operations in order until none is left (nil) or UPS cannot take one (why not).
    private func deliverQueued() async -> (String?, busyElsewhere: Bool) {
        do {
            // One relay at a time keeps the outbox's order and sends nothing twice.
            guard let reason = try await devices.store.exclusively("push outbox", waitingUpTo: nil, { await self.deliverAll() }) else {
                return (nil, true)
            }
            return (reason, false)
        } catch {
            logger.error("Push outbox cannot be read: \(error)")
            return ("the outbox cannot be read", false)
        }
    }

    private func deliverAll() async -> String? {
        while !Task.isCancelled {
            let batch: [PushOperation]
            do {
                batch = try await devices.queued(limit: 50)
            } catch {
                logger.error("Push outbox cannot be read: \(error)")
                return "the outbox cannot be read"
            }
            if batch.isEmpty { return nil }
            for operation in batch {
                if let reason = await deliver(operation) { return reason }
            }
        }
        return nil
    }

    private func deliver(_ operation: PushOperation) async -> String? {
        guard let id = operation.id else { return nil }
        let answer: UnifiedPushClient.Answer
        switch operation.operation {
        case .register:
            answer = await client.register(operation.body ?? Data(), platform: operation.platform ?? .ios, oldToken: operation.oldDeviceToken)
        case .unregister:
            answer = await client.unregister(token: operation.deviceToken ?? "", platform: operation.platform ?? .ios)
        case .send:
            answer = await client.send(operation.body ?? Data())
        }
        do {
            switch answer {
            case .done:
                try await devices.delivered(operation)
                resolve(id, .done)
            case .refused(let status, let detail):
                try await devices.abandoned(operation)
                logger.error("Unified Push refused \(describe(operation)) with \(status): \(detail)\(Self.hint(status))")
                resolve(id, answer)
            case .unavailable(let reason):
                if Date().timeIntervalSince(operation.createdAt) > Self.maximumAge {
                    try await devices.abandoned(operation)
                    logger.error("Gave up on \(describe(operation)) after \(operation.attempts + 1) attempts over a day: \(reason)")
                    return nil
                }
                try await devices.failed(operation, reason: reason)
                logger.warning("Unified Push cannot take \(describe(operation)) yet; it waits in the outbox: \(reason)")
                resolve(id, answer)
                return reason
            }
        } catch {
            logger.error("Push outbox cannot be updated after \(describe(operation)): \(error)")
            return "the outbox cannot be updated"
        }
        return nil
    }

    private func resolve(_ id: Int64, _ outcome: Outcome) {
        outcomes.resolve(id, outcome)
        delivered(id, outcome)
    }

    private func describe(_ operation: PushOperation) -> String {
        switch operation.operation {
        case .register: "the registration of an \(operation.platform?.displayName ?? "unknown") device"
        case .unregister: "the removal of an \(operation.platform?.displayName ?? "unknown") device"
        case .send: "a message (outbox #\(operation.id ?? 0))"
        }
    }

    private static func hint(_ status: Int) -> String {
        status == 401 ? " (check the variant or push application credentials Foyer is configured with)" : ""
    }
}

/// Wakes one waiting task, or the next one to wait. Rings while nobody waits are kept as one.
final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = NIOLockedValueBox(State())

    func ring() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.rung = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns when rung or after `limit`, whichever is first.
    func wait(upTo limit: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForRing() }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForRing() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLockedValue { state -> Bool in
                    if state.rung || Task.isCancelled {
                        state.rung = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}

/// Outcomes of operations by id, for requests that wait for theirs. An outcome that comes before anyone waits is
/// kept a minute, so a request that queued an operation cannot miss what became of it.
private final class Outcomes: Sendable {
    private struct State {
        var known: [Int64: (PushRelay.Outcome, Date)] = [:]
        var waiting: [Int64: CheckedContinuation<PushRelay.Outcome?, Never>] = [:]
    }

    private let state = NIOLockedValueBox(State())

    func resolve(_ id: Int64, _ outcome: PushRelay.Outcome) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<PushRelay.Outcome?, Never>? in
            if let waiter = state.waiting.removeValue(forKey: id) { return waiter }
            let now = Date()
            if state.known.count > 256 { state.known = state.known.filter { now.timeIntervalSince($0.value.1) < 60 } }
            state.known[id] = (outcome, now)
            return nil
        }
        waiter?.resume(returning: outcome)
    }

    /// Everyone waiting hears this: the relay stopped before reaching their operations.
    func resolveAllWaiting(_ outcome: PushRelay.Outcome) {
        let waiters = state.withLockedValue { state in
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    func wait(for id: Int64, upTo limit: Duration) async -> PushRelay.Outcome? {
        await withTaskGroup(of: PushRelay.Outcome?.self) { group in
            group.addTask { await self.waitForOutcome(id) }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    private func waitForOutcome(_ id: Int64) async -> PushRelay.Outcome? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let known = state.withLockedValue { state -> PushRelay.Outcome?? in
                    if let known = state.known.removeValue(forKey: id) { return .some(known.0) }
                    if Task.isCancelled { return .some(nil) }
                    state.waiting[id] = continuation
                    return nil
                }
                if let known { continuation.resume(returning: known) }
            }
        } onCancel: {
            let waiter = state.withLockedValue { $0.waiting.removeValue(forKey: id) }
            waiter?.resume(returning: nil)
        }
    }
}
