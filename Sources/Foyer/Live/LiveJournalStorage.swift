import Foundation
import GRDB
import PostgresNIO

/// One live event as the store keeps it: its number on its stream, its `<turbo-stream>` HTML, when it was
/// appended, and whose words it carries (a block keeps some readers from it).
struct JournaledEvent: Sendable, Equatable {
    let sequence: UInt64
    let html: String
    let appendedAt: Date
    var author: Int64? = nil
}

/// The live events of the window, kept in the store so that their numbers mean the same on every instance sharing
/// it and after a restart. A stream's numbers come from one counter row, taken in the appending transaction: two
/// instances appending at once are serialized by its lock, so numbers are committed in their order and a reader
/// that sees number N sees every number before it.
protocol LiveJournalStorage: Sendable {
    /// Appends `html` to `stream` and gives its number; forgets what left the window meanwhile.
    func append(_ html: String, to stream: String, author: Int64?, keeping limits: LiveChannel.Limits) async throws -> UInt64
    /// The events after `sequence` still in the window, oldest first, and the stream's latest number (0 before its
    /// first event). A caller at 0 gets the whole window.
    func events(of stream: String, after sequence: UInt64, within limits: LiveChannel.Limits) async throws -> (events: [JournaledEvent], latest: UInt64)
}

extension Store {
    var liveJournalStorage: any LiveJournalStorage {
        choose(sqlite: SQLiteLiveJournalStorage.init, postgres: PostgresLiveJournalStorage.init)
    }
}

extension LiveChannel.Limits {
    /// The oldest moment an event of the window may have been appended at.
    func oldestKept(now: Date = Date()) -> Date { now.addingTimeInterval(-maxAge.seconds) }
}

struct SQLiteLiveJournalStorage: LiveJournalStorage {
    let database: any DatabaseWriter

    func append(_ html: String, to stream: String, author: Int64?, keeping limits: LiveChannel.Limits) async throws -> UInt64 {
        let now = Date()
        return try await database.write { db in
            let sequence = try Int64.fetchOne(
                db,
                sql: """
                    INSERT INTO live_streams (stream, latest) VALUES (?, 1)
                    ON CONFLICT (stream) DO UPDATE SET latest = live_streams.latest + 1 RETURNING latest
                    """,
                arguments: [stream]
            )!
            try db.execute(
                sql: "INSERT INTO live_events (stream, sequence, html, appended_at, author_id) VALUES (?, ?, ?, ?, ?)",
                arguments: [stream, sequence, html, now, author]
            )
            try db.execute(
                sql: "DELETE FROM live_events WHERE stream = ? AND (sequence <= ? OR appended_at < ?)",
                arguments: [stream, sequence - Int64(limits.window), limits.oldestKept(now: now)]
            )
            return UInt64(sequence)
        }
    }

    func events(of stream: String, after sequence: UInt64, within limits: LiveChannel.Limits) async throws -> (events: [JournaledEvent], latest: UInt64) {
        try database.readNow { db in
            let latest = try Int64.fetchOne(db, sql: "SELECT latest FROM live_streams WHERE stream = ?", arguments: [stream]) ?? 0
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT sequence, html, appended_at, author_id FROM live_events
                    WHERE stream = ? AND sequence > ? AND appended_at >= ? ORDER BY sequence
                    """,
                arguments: [stream, max(Int64(sequence), latest - Int64(limits.window)), limits.oldestKept()]
            )
            let events = rows.map {
                JournaledEvent(sequence: UInt64($0["sequence"] as Int64), html: $0["html"], appendedAt: $0["appended_at"], author: $0["author_id"])
            }
            return (events, UInt64(latest))
        }
    }
}

struct PostgresLiveJournalStorage: LiveJournalStorage {
    let store: PostgresStore

    func append(_ html: String, to stream: String, author: Int64?, keeping limits: LiveChannel.Limits) async throws -> UInt64 {
        let now = Date()
        let oldest = limits.oldestKept(now: now)
        let window = Int64(limits.window)
        return try await store.transaction { connection in
            // The counter row stays locked until the commit: the next appender waits for it, so numbers commit in order.
            let rows = try await connection.query("""
                INSERT INTO live_streams (stream, latest) VALUES (\(stream), 1)
                ON CONFLICT (stream) DO UPDATE SET latest = live_streams.latest + 1 RETURNING latest
                """, logger: store.logger)
            var sequence: Int64 = 0
            for try await row in rows { sequence = try row.decode(Int64.self) }
            try await connection.query("""
                INSERT INTO live_events (stream, sequence, html, appended_at, author_id)
                VALUES (\(stream), \(sequence), \(html), \(now), \(author))
                """, logger: store.logger)
            try await connection.query("""
                DELETE FROM live_events WHERE stream = \(stream) AND (sequence <= \(sequence - window) OR appended_at < \(oldest))
                """, logger: store.logger)
            return UInt64(sequence)
        }
    }

    func events(of stream: String, after sequence: UInt64, within limits: LiveChannel.Limits) async throws -> (events: [JournaledEvent], latest: UInt64) {
        let (after, window, oldest) = (Int64(sequence), Int64(limits.window), limits.oldestKept())
        // One statement, one snapshot: the latest number and the events agree.
        let rows = try await store.query("""
            WITH position AS (SELECT coalesce((SELECT latest FROM live_streams WHERE stream = \(stream)), 0) AS latest)
            SELECT position.latest, events.sequence, events.html, events.appended_at, events.author_id
            FROM position LEFT JOIN live_events AS events
                ON events.stream = \(stream) AND events.sequence > greatest(\(after), position.latest - \(window))
                AND events.appended_at >= \(oldest)
            ORDER BY events.sequence
            """)
        var latest: Int64 = 0
        var events: [JournaledEvent] = []
        for row in rows {
            let (position, number, html, appendedAt, author) = try row.decode((Int64, Int64?, String?, Date?, Int64?).self)
            latest = position
            if let number, let html, let appendedAt {
                events.append(JournaledEvent(sequence: UInt64(number), html: html, appendedAt: appendedAt, author: author))
            }
        }
        return (events, UInt64(latest))
    }
}
