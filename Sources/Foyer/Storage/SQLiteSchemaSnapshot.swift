import Foundation
import GRDB

/// The schema Foyer's SQLite migrations leave in an empty database, as Rails keeps `db/schema.rb`: a new database
/// is made from it in one transaction, where the migrations one by one (a transaction, a foreign-key check and a
/// schema reload each) were most of a fresh start. The migrations it stands for are recorded as applied; any newer
/// ones then run as usual, so a snapshot older than the migrations is slower, never wrong. The file
/// (`Resources/sqlite-schema.sql`) is written from the migrations by `StorageTests`, which fails when it differs.
enum SQLiteSchemaSnapshot {
    static let header = """
        -- Foyer's SQLite schema as its migrations (Storage/Migrations.swift) leave an empty database, written from them by
        -- StorageTests: never edit it by hand. A new database is made from it; the migrations listed are recorded as applied.

        """
    static let migrationPrefix = "-- migration: "

    /// Makes the schema in `database` from the shipped snapshot when the database has nothing in it yet and the
    /// snapshot's migrations are the first of `migrator`'s. Returns whether it did.
    @discardableResult
    static func loadIfEmpty(_ database: any DatabaseWriter, migrator: DatabaseMigrator) throws -> Bool {
        guard let url = Bundle.module.url(forResource: "sqlite-schema", withExtension: "sql"),
            let text = try? String(contentsOf: url, encoding: .utf8)
        else { return false }
        let migrations = text.split(separator: "\n").compactMap { line in
            line.hasPrefix(migrationPrefix) ? String(line.dropFirst(migrationPrefix.count)) : nil
        }
        guard !migrations.isEmpty, migrator.migrations.starts(with: migrations) else { return false }
        return try database.write { db in
            guard try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") == 0 else { return false }
            try db.execute(sql: text)
            for migration in migrations {
                try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES (?)", arguments: [migration])
            }
            return true
        }
    }

    /// The snapshot of `db`'s schema: its migrations, then each table and index as SQLite keeps its text, in the
    /// order they were made. `sqlite_sequence` and the indexes of UNIQUE and PRIMARY KEY constraints come with their
    /// tables.
    static func text(of db: Database) throws -> String {
        let migrations = try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid")
        let statements = try String.fetchAll(
            db, sql: "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name <> 'sqlite_sequence' ORDER BY rowid"
        )
        return header + migrations.map { migrationPrefix + $0 + "\n" }.joined() + "\n" + statements.map { $0 + ";\n" }.joined()
    }
}
