import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// What one instance tells the others sharing its PostgreSQL database, so their caches and live pages keep up:
/// PostgreSQL's LISTEN/NOTIFY on one channel, no other broker. Signals go out in the order they were sent;
/// each names the instance it came from, and an instance ignores its own.
final class ClusterSignals: Service, Sendable {
    enum Signal: Codable, Sendable, Equatable {
        /// Sessions revoked or pruned: cached entries must go.
        case sessionsEnded([String])
        case postChanged(PostChangeKind, id: Int64)
        /// A change of the embedded task service's (other instances' pages and subscriptions hear of it).
        case taskChanged(String, TaskSnapshot)
        /// The same, for a task too large for a notification's 8,000 bytes: read it from the database.
        case taskStored(String, id: Int64)
        /// Who made changes at the remote task server (its events do not say).
        case tasksAuthored([String], userID: Int64)
        /// What Unified Push answered to an outbox operation (a request on another instance may be waiting for it).
        case pushOutcome(Int64, UnifiedPushClient.Answer)
    }

    enum PostChangeKind: String, Codable, Sendable { case created, updated, deleted }

    struct TaskSnapshot: Codable, Sendable, Equatable {
        let id: Int64
        let title: String
        let description: String
        let status: String
        let version: Int
    }

    private struct Envelope: Codable {
        let from: String
        let signal: Signal
    }

    /// Notifications and advisory locks belong to the whole database: Foyers whose tables are in other schemas
    /// of it (the test suite's stores) must not hear each other or share a leader.
    let channel: String
    let instance = UUID().uuidString
    private let store: PostgresStore
    private let logger: Logger
    private let outgoing: AsyncStream<Signal>.Continuation
    private let outgoingSignals: AsyncStream<Signal>
    private let handlers = NIOLockedValueBox<[@Sendable (Signal) async -> Void]>([])
    private let gapHandlers = NIOLockedValueBox<[@Sendable () -> Void]>([])
    private let breakHandlers = NIOLockedValueBox<[@Sendable () -> Void]>([])
    /// True while this instance hears the others.
    private let listening = NIOLockedValueBox(false)
    private let leading = NIOLockedValueBox(false)
    /// Held by one instance's listening connection at a time; the others try again every `leadershipRetry`. The
    /// lock's two keys: this constant and the hash of the schema.
    private static let leadershipLock: Int32 = 0x666f_796c
    static let leadershipRetry: Duration = .seconds(3)

    /// Whether this instance is the one that acts for all on what every instance hears alike (a remote task
    /// server's events, which each instance's own subscription brings): exactly one while they all listen.
    var isLeader: Bool { leading.withLockedValue { $0 } }

    init(store: PostgresStore, logger: Logger) {
        self.store = store
        self.logger = logger
        channel = store.schema.map { "foyer_signals_\($0)" } ?? "foyer_signals"
        (outgoingSignals, outgoing) = AsyncStream.makeStream(of: Signal.self)
    }

    /// Queued and sent in order; never waits for the database.
    func send(_ signal: Signal) { outgoing.yield(signal) }

    /// `handler` hears every other instance's signals, one at a time, in order.
    func onSignal(_ handler: @escaping @Sendable (Signal) async -> Void) { handlers.withLockedValue { $0.append(handler) } }

    /// `handler` runs when listening starts again after a break: signals may have been missed meanwhile, so
    /// whatever they keep fresh must be thrown away or reloaded.
    func onGap(_ handler: @escaping @Sendable () -> Void) { gapHandlers.withLockedValue { $0.append(handler) } }

    /// `handler` runs when listening stops: from now on nothing says what the others change, so caches can
    /// no longer be trusted.
    func onBreak(_ handler: @escaping @Sendable () -> Void) { breakHandlers.withLockedValue { $0.append(handler) } }

    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.sendAll() }
            group.addTask { await self.listen() }
            try? await gracefulShutdown()
            outgoing.finish()
            group.cancelAll()
        }
    }

    private func sendAll() async {
        let encoder = JSONEncoder()
        for await signal in outgoingSignals {
            guard var payload = try? String(decoding: encoder.encode(Envelope(from: instance, signal: signal)), as: UTF8.self) else { continue }
            // A NOTIFY payload must stay under 8,000 bytes. A task with a long description goes by its id instead.
            if payload.utf8.count >= 7_900, case .taskChanged(let kind, let task) = signal,
                let smaller = try? String(decoding: encoder.encode(Envelope(from: instance, signal: .taskStored(kind, id: task.id))), as: UTF8.self)
            {
                payload = smaller
            }
            guard payload.utf8.count < 7_900 else {
                logger.error("A cluster signal was too large to send", metadata: ["bytes": .stringConvertible(payload.utf8.count)])
                continue
            }
            for attempt in 0..<3 {
                do {
                    try await store.query("SELECT pg_notify(\(self.channel), \(payload))")
                    break
                } catch {
                    // The others will see a gap in their listening and reload anyway once the database is back.
                    if attempt == 2 { logger.warning("A cluster signal could not be sent: \(error)") }
                    try? await Task.sleep(for: .milliseconds(200))
                }
            }
        }
    }

    /// Hands each other instance's signal to the handlers, and takes the lead when it is free, until the
    /// connection ends (or the task is cancelled).
    private func hear(_ notifications: PostgresNotificationSequence, on connection: PostgresConnection, decoder: JSONDecoder) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.leadWhenFree(connection) }
            group.addTask {
                for try await notification in notifications {
                    guard let envelope = try? decoder.decode(Envelope.self, from: Data(notification.payload.utf8)),
                        envelope.from != self.instance
                    else { continue }
                    for handler in self.handlers.withLockedValue({ $0 }) { await handler(envelope.signal) }
                }
            }
            // Either ends only when the connection does (or on cancellation).
            try await group.next()
            group.cancelAll()
        }
    }

    /// The connection goes back to the pool: it must not keep the lead with it. (A connection that died took the
    /// lock along already.) Not cancelled with the caller, or a shutting-down instance would keep the lock; but
    /// never waited on for more than a second.
    private func stepDown(_ connection: PostgresConnection) async {
        guard isLeader, !connection.isClosed else { return }
        let logger = logger
        let unlock = Task.detached {
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.leadershipLock), hashtext(current_schema()))", logger: logger).collect()
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await unlock.value }
            group.addTask { try? await Task.sleep(for: .seconds(1)) }
            await group.next()
            group.cancelAll()
        }
    }

    /// A session-level advisory lock on the listening connection: it is released when that connection ends, so
    /// another instance takes over within `leadershipRetry` of this one going.
    private func leadWhenFree(_ connection: PostgresConnection) async throws {
        while !Task.isCancelled {
            if !isLeader {
                let won = try await connection.query("SELECT pg_try_advisory_lock(\(Self.leadershipLock), hashtext(current_schema()))", logger: logger).collect()
                if try won.first?.decode(Bool.self) == true {
                    leading.withLockedValue { $0 = true }
                    logger.info("This instance now acts for all on the remote task server's events")
                }
            }
            try await Task.sleep(for: Self.leadershipRetry)
        }
    }

    private func listen() async {
        var failures = 0
        var listenedBefore = false
        let decoder = JSONDecoder()
        while !Task.isCancelled {
            do {
                try await store.client.withConnection { connection in
                    try await connection.listen(on: self.channel) { notifications in
                        self.listening.withLockedValue { $0 = true }
                        if listenedBefore {
                            self.logger.info("Listening to the other instances again; dropping what their signals keep fresh")
                            for handler in self.gapHandlers.withLockedValue({ $0 }) { handler() }
                        }
                        listenedBefore = true
                        failures = 0
                        defer { self.leading.withLockedValue { $0 = false } }
                        do {
                            try await self.hear(notifications, on: connection, decoder: decoder)
                        } catch {
                            await self.stepDown(connection)
                            throw error
                        }
                        await self.stepDown(connection)
                    }
                }
            } catch {
                if Task.isCancelled { break }
                if failures == 0 {
                    logger.warning("Stopped hearing the other instances (PostgreSQL): \(error)")
                    if let error = error as? PSQLError, PostgresStore.meansUnreachable(error) {
                        store.noticeUnreachable(.init(description: "PostgreSQL at \(store.location.redacted) closed the connection: \(PostgresStore.describe(error))"))
                    }
                }
            }
            let wasListening = listening.withLockedValue { listening in
                defer { listening = false }
                return listening
            }
            if wasListening {
                for handler in breakHandlers.withLockedValue({ $0 }) { handler() }
            }
            failures += 1
            let delay = min(5.0, 0.25 * pow(2, Double(min(failures - 1, 5))))
            try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
        }
    }
}

extension ClusterSignals.TaskSnapshot {
    init(_ task: TaskRecord) {
        self.init(id: task.id ?? 0, title: task.title, description: task.description, status: task.status, version: task.version)
    }

    var record: TaskRecord { TaskRecord(id: id, title: title, description: description, status: status, version: version) }
}

extension PostChange {
    var signal: ClusterSignals.Signal {
        switch self {
        case .created(let post): .postChanged(.created, id: post.id)
        case .updated(let post): .postChanged(.updated, id: post.id)
        case .deleted(let id): .postChanged(.deleted, id: id)
        }
    }
}
