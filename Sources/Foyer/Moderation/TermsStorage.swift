import Foundation
import GRDB
import PostgresNIO

/// When each version of the terms came into force, and who accepted them when.
protocol TermsStorage: Sendable {
    /// When `version` came into force: recorded now if no instance served it before, or at the beginning of time
    /// if it is the first version the database has.
    func effectiveAt(version: String, now: Date) async throws -> Date
    func accept(userId: Int64, at date: Date) async throws
}

extension Store {
    var termsStorage: any TermsStorage { choose(sqlite: SQLiteTermsStorage.init, postgres: PostgresTermsStorage.init) }
}

struct SQLiteTermsStorage: TermsStorage {
    let database: any DatabaseWriter

    func effectiveAt(version: String, now: Date) async throws -> Date {
        try await database.write { db in
            if let known = try Date.fetchOne(db, sql: "SELECT effective_at FROM terms_versions WHERE version = ?", arguments: [version]) {
                return known
            }
            let first = try Int.fetchOne(db, sql: "SELECT count(*) FROM terms_versions") == 0
            let effective = first ? Date(timeIntervalSince1970: 0) : now
            try db.execute(sql: "INSERT INTO terms_versions (version, effective_at) VALUES (?, ?)", arguments: [version, effective])
            return effective
        }
    }

    func accept(userId: Int64, at date: Date) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE users SET terms_accepted_at = ? WHERE id = ?", arguments: [date, userId])
        }
    }
}

struct PostgresTermsStorage: TermsStorage {
    let store: PostgresStore

    func effectiveAt(version: String, now: Date) async throws -> Date {
        let beginning = Date(timeIntervalSince1970: 0)
        // Two instances starting with new terms at once: one row wins, and both read it.
        try await store.query("""
            INSERT INTO terms_versions (version, effective_at)
            SELECT \(version), CASE WHEN EXISTS (SELECT 1 FROM terms_versions) THEN \(now) ELSE \(beginning) END
            ON CONFLICT (version) DO NOTHING
            """)
        return try await store.query("SELECT effective_at FROM terms_versions WHERE version = \(version)")[0].decode(Date.self)
    }

    func accept(userId: Int64, at date: Date) async throws {
        try await store.query("UPDATE users SET terms_accepted_at = \(date) WHERE id = \(userId)")
    }
}
