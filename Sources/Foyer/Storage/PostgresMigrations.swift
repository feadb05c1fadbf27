import Foundation
import PostgresNIO

/// Applies Foyer's PostgreSQL migrations (`Migrations.swift`), each once, in its own transaction.
enum PostgresMigrations {
    /// An arbitrary constant: instances starting together take turns at the schema.
    private static let lockKey: Int64 = 0x666f_7965_725f_6462

    static func migrate(_ store: PostgresStore) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            try await connection.run("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
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
