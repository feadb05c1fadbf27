import Foundation
import PostgresNIO

/// Applies Foyer's PostgreSQL migrations (`Migrations.swift`), each once, in its own transaction.
enum PostgresMigrations {
    /// An arbitrary constant: instances starting together take turns at the schema. The lock is the schema's
    /// (the seed hashed with its name): stores of different schemas, as the tests' are, do not wait for each other.
    private static let lockKey: Int64 = 0x666f_7965_725f_6462

    /// Start-up work, not a request: a fresh database's whole schema in one transaction (and the tests' many
    /// schemas made at once on two cores) takes longer than a request's 5 s.
    static let deadline: Duration = .seconds(120)

    static func migrate(_ store: PostgresStore) async throws {
        let logger = store.logger
        try await store.transaction(deadline: deadline) { connection in
            try await connection.run("SELECT pg_advisory_xact_lock(hashtextextended(current_schema(), \(lockKey)))", logger: logger)
            try await connection.run(
                "CREATE TABLE IF NOT EXISTS foyer_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)",
                logger: logger
            )
            var applied = Set<String>()
            for try await name in try await connection.query("SELECT name FROM foyer_migrations", logger: logger).decode(String.self) {
                applied.insert(name)
            }
            for migration in all where !applied.contains(migration.name) {
                for statement in migration.sql {
                    try await connection.run(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.run("INSERT INTO foyer_migrations (name, applied_at) VALUES (\(migration.name), \(Date()))", logger: logger)
                logger.info("Applied database migration", metadata: ["migration": .string(migration.name)])
            }
        }
    }
}
