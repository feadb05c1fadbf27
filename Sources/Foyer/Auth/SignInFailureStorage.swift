import Foundation
import GRDB
import PostgresNIO

/// The rows behind `SignInThrottle`: one per failed sign-in under each key it counts against.
protocol SignInFailureStorage: Sendable {
    /// In one transaction: when some key has `limit` or more failures after `since`, the latest time one of them
    /// reopens (nothing is written); otherwise a failure at `now` for every key, whose row ids are returned.
    func countAttempt(keys: [(key: String, limit: Int)], since: Date, now: Date, window: TimeInterval) async throws -> (reopensAt: Date?, rowIDs: [Int64])
    func delete(rowIDs: [Int64], alsoKey: String?) async throws
    func deleteBefore(_ date: Date) async throws
}

extension Store {
    var signInFailureStorage: any SignInFailureStorage { choose(sqlite: SQLiteSignInFailureStorage.init, postgres: PostgresSignInFailureStorage.init) }
}

struct SQLiteSignInFailureStorage: SignInFailureStorage {
    let database: any DatabaseWriter

    func countAttempt(keys: [(key: String, limit: Int)], since: Date, now: Date, window: TimeInterval) async throws -> (reopensAt: Date?, rowIDs: [Int64]) {
        try await database.write { db -> (Date?, [Int64]) in
            var latest: Date?
            for (key, limit) in keys {
                let count = try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM sign_in_failures WHERE key = ? AND failed_at > ?", arguments: [key, since]
                ) ?? 0
                guard count >= limit else { continue }
                // Open again once enough of these failures have left the window to be under the limit.
                let expiring = try Date.fetchOne(
                    db, sql: "SELECT failed_at FROM sign_in_failures WHERE key = ? AND failed_at > ? ORDER BY failed_at LIMIT 1 OFFSET ?",
                    arguments: [key, since, count - limit]
                )
                if let reopens = expiring?.addingTimeInterval(window), reopens > latest ?? .distantPast { latest = reopens }
            }
            if latest != nil { return (latest, []) }
            var rowIDs: [Int64] = []
            for (key, _) in keys {
                try db.execute(sql: "INSERT INTO sign_in_failures (key, failed_at) VALUES (?, ?)", arguments: [key, now])
                rowIDs.append(db.lastInsertedRowID)
            }
            try db.execute(sql: "DELETE FROM sign_in_failures WHERE failed_at <= ?", arguments: [since])
            return (nil, rowIDs)
        }
    }

    func delete(rowIDs: [Int64], alsoKey key: String?) async throws {
        try await database.write { db in
            for id in rowIDs { try db.execute(sql: "DELETE FROM sign_in_failures WHERE id = ?", arguments: [id]) }
            if let key { try db.execute(sql: "DELETE FROM sign_in_failures WHERE key = ?", arguments: [key]) }
        }
    }

    func deleteBefore(_ date: Date) async throws {
        try await database.write { db in try db.execute(sql: "DELETE FROM sign_in_failures WHERE failed_at <= ?", arguments: [date]) }
    }
}

struct PostgresSignInFailureStorage: SignInFailureStorage {
    let store: PostgresStore

    func countAttempt(keys: [(key: String, limit: Int)], since: Date, now: Date, window: TimeInterval) async throws -> (reopensAt: Date?, rowIDs: [Int64]) {
        let logger = store.logger
        return try await store.transaction { connection in
            // Attempts on any instance for the same login or client queue here, so each sees the others' rows.
            for (key, _) in keys.sorted(by: { $0.key < $1.key }) {
                try await connection.run("SELECT pg_advisory_xact_lock(hashtext('sign-in ' || \(key)))", logger: logger)
            }
            var latest: Date?
            for (key, limit) in keys {
                let count = try await connection.run(
                    "SELECT count(*) FROM sign_in_failures WHERE key = \(key) AND failed_at > \(since)", logger: logger
                )[0].decode(Int.self)
                guard count >= limit else { continue }
                let expiring = try await connection.run("""
                    SELECT failed_at FROM sign_in_failures WHERE key = \(key) AND failed_at > \(since)
                    ORDER BY failed_at LIMIT 1 OFFSET \(count - limit)
                    """, logger: logger).first?.decode(Date.self)
                if let reopens = expiring?.addingTimeInterval(window), reopens > latest ?? .distantPast { latest = reopens }
            }
            if latest != nil { return (latest, []) }
            var rowIDs: [Int64] = []
            for (key, _) in keys {
                rowIDs.append(try await connection.run(
                    "INSERT INTO sign_in_failures (key, failed_at) VALUES (\(key), \(now)) RETURNING id", logger: logger
                )[0].decode(Int64.self))
            }
            try await connection.run("DELETE FROM sign_in_failures WHERE failed_at <= \(since)", logger: logger)
            return (nil, rowIDs)
        }
    }

    func delete(rowIDs: [Int64], alsoKey key: String?) async throws {
        try await store.query("DELETE FROM sign_in_failures WHERE id = ANY(\(rowIDs)) OR key = \(key)")
    }

    func deleteBefore(_ date: Date) async throws {
        try await store.query("DELETE FROM sign_in_failures WHERE failed_at <= \(date)")
    }
}
