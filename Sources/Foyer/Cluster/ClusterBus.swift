import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// A kind of message instances tell each other, and the Codable type it carries. Each feature declares its own
/// topics next to the handler that follows them; the bus knows nothing of what they mean.
struct ClusterTopic<Message: Codable & Sendable>: Sendable {
    let name: String

    init(_ name: String) {
        precondition(!name.isEmpty && !name.contains(where: { $0 == " " || $0 == "\n" }), "a topic name is one word")
        self.name = name
    }
}

/// What one instance tells the others sharing its PostgreSQL database, so their caches and live pages keep up:
/// PostgreSQL's LISTEN/NOTIFY on one channel, no other broker. Messages go out in the order they were sent,
/// whatever their topic; each names the instance it came from, and an instance ignores its own. A message too
/// large for a notification is stored in `foyer_cluster_messages` and travels by reference.
final class ClusterBus: Service, Sendable {
    /// NOTIFY payloads must stay under 8,000 bytes; a little is kept for the header.
    static let largestNotification = 7_900
    /// How long a message sent by reference is kept for instances to read it.
    static let storedMessageLifetime = "5 minutes"

    /// Notifications belong to the whole database: Foyers whose tables are in other schemas of it (the test
    /// suite's stores) must not hear each other.
    let channel: String
    let instance = UUID().uuidString
    private let store: PostgresStore
    private let logger: Logger
    private let outgoing: AsyncStream<(topic: String, body: Data)>.Continuation
    private let outgoingMessages: AsyncStream<(topic: String, body: Data)>
    private let handlers = NIOLockedValueBox<[String: [@Sendable (Data) async -> Void]]>([:])
    private let gapHandlers = NIOLockedValueBox<[@Sendable () -> Void]>([])
    private let breakHandlers = NIOLockedValueBox<[@Sendable () -> Void]>([])
    /// True while this instance hears the others.
    private let listening = NIOLockedValueBox(false)
    var isListening: Bool { listening.withLockedValue { $0 } }

    init(store: PostgresStore, logger: Logger) {
        self.store = store
        self.logger = logger
        channel = store.schema.map { "foyer_signals_\($0)" } ?? "foyer_signals"
        (outgoingMessages, outgoing) = AsyncStream.makeStream(of: (topic: String, body: Data).self)
    }

    /// Queued and sent in order; never waits for the database.
    func send<Message>(_ message: Message, on topic: ClusterTopic<Message>) {
        do {
            outgoing.yield((topic.name, try JSONEncoder().encode(message)))
        } catch {
            logger.error("A cluster message could not be encoded", metadata: ["topic": .string(topic.name), "error": .string("\(error)")])
        }
    }

    /// `handler` hears every other instance's messages on `topic`, one at a time, in the order sent (all topics'
    /// handlers share that one order).
    func on<Message>(_ topic: ClusterTopic<Message>, _ handler: @escaping @Sendable (Message) async -> Void) {
        let (logger, name) = (logger, topic.name)
        let decoding: @Sendable (Data) async -> Void = { body in
            do {
                await handler(try JSONDecoder().decode(Message.self, from: body))
            } catch {
                logger.warning("A cluster message could not be read", metadata: ["topic": .string(name), "error": .string("\(error)")])
            }
        }
        handlers.withLockedValue { $0[topic.name, default: []].append(decoding) }
    }

    /// `handler` runs when listening starts again after a break: messages may have been missed meanwhile, so
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

    // MARK: The wire: "INSTANCE TOPIC\nBODY", or "INSTANCE TOPIC @ID" for a body stored by reference.

    private func sendAll() async {
        for await (topic, body) in outgoingMessages {
            for attempt in 0..<3 {
                do {
                    try await store.query("SELECT pg_notify(\(self.channel), \(try await payload(topic: topic, body: body)))")
                    break
                } catch {
                    // The others will see a gap in their listening and reload anyway once the database is back.
                    if attempt == 2 { logger.warning("A cluster message could not be sent: \(error)") }
                    try? await Task.sleep(for: .milliseconds(200))
                }
            }
        }
    }

    private func payload(topic: String, body: Data) async throws -> String {
        let header = "\(instance) \(topic)"
        if header.utf8.count + 1 + body.count < Self.largestNotification {
            return header + "\n" + String(decoding: body, as: UTF8.self)
        }
        let text = String(decoding: body, as: UTF8.self)
        let stored = try await store.query("""
            WITH forgotten AS (DELETE FROM foyer_cluster_messages WHERE sent_at < now() - \(Self.storedMessageLifetime)::interval)
            INSERT INTO foyer_cluster_messages (body, sent_at) VALUES (\(text), now()) RETURNING id
            """)
        return header + " @\(try stored[0].decode(Int64.self))"
    }

    private func deliver(_ payload: String) async {
        let (head, body) = payload.firstIndex(of: "\n").map { (payload[..<$0], Substring(payload[payload.index(after: $0)...])) } ?? (Substring(payload), nil)
        let parts = head.split(separator: " ")
        guard parts.count >= 2, parts[0] != instance[...] else { return }
        guard let handlers = handlers.withLockedValue({ $0[String(parts[1])] }), !handlers.isEmpty else { return }
        var data: Data
        if let body {
            data = Data(body.utf8)
        } else if parts.count == 3, parts[2].hasPrefix("@"), let id = Int64(parts[2].dropFirst()) {
            guard let rows = try? await store.query("SELECT body FROM foyer_cluster_messages WHERE id = \(id)"),
                let text = try? rows.first?.decode(String.self)
            else {
                logger.warning("A cluster message sent by reference could not be read", metadata: ["topic": .string(String(parts[1]))])
                return
            }
            data = Data(text.utf8)
        } else {
            return
        }
        for handler in handlers { await handler(data) }
    }

    private func listen() async {
        var failures = 0
        var listenedBefore = false
        while !Task.isCancelled {
            do {
                try await store.client.withConnection { connection in
                    try await connection.listen(on: self.channel) { notifications in
                        self.listening.withLockedValue { $0 = true }
                        if listenedBefore {
                            self.logger.info("Listening to the other instances again; dropping what their messages keep fresh")
                            for handler in self.gapHandlers.withLockedValue({ $0 }) { handler() }
                        }
                        listenedBefore = true
                        failures = 0
                        for try await notification in notifications { await self.deliver(notification.payload) }
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
