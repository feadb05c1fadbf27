import Foundation
import GRDB
import PostgresNIO
import Testing

@testable import Foyer

/// SQLite's and PostgreSQL's migrations (`Storage/Migrations.swift`) make the same tables, columns (type kind and
/// nullability) and indexes (columns and uniqueness; names differ), so the two schemas cannot drift apart.
@Suite struct SchemaParityTests {
    /// What only instances sharing PostgreSQL need, and each store's own migration bookkeeping.
    static let storeOwnTables: Set<String> = ["grdb_migrations", "foyer_migrations", "foyer_leases", "foyer_cluster_messages"]

    struct Column: Hashable, CustomStringConvertible {
        let table, name, kind: String
        let notNull: Bool
        var description: String { "\(table).\(name) \(kind)\(notNull ? " NOT NULL" : "")" }
    }

    struct Index: Hashable, CustomStringConvertible {
        let table: String
        let columns: [String]
        let unique: Bool
        var description: String { "\(unique ? "UNIQUE " : "")\(table)(\(columns.joined(separator: ", ")))" }
    }

    @Test func sqliteAndPostgresMakeTheSameTablesColumnsAndIndexes() async throws {
        let sqlite = try SQLiteStore.openAndMigrate(path: ":memory:")
        let store = try await Store.fresh(.postgres)
        defer { store.close() }
        let postgres = try #require(store.postgres)

        let (sqliteColumns, sqliteIndexes) = try await Self.schema(of: sqlite)
        let (postgresColumns, postgresIndexes) = try await Self.schema(of: postgres)
        #expect(sqliteColumns.contains(Column(table: "sessions", name: "revoked_at", kind: "time", notNull: false)))
        #expect(sqliteIndexes.contains(Index(table: "users", columns: ["email"], unique: true)), "lower(email) is read as email")
        #expect(sqliteColumns.subtracting(postgresColumns).sorted(by: { $0.description < $1.description }) == [], "in SQLite only")
        #expect(postgresColumns.subtracting(sqliteColumns).sorted(by: { $0.description < $1.description }) == [], "in PostgreSQL only")
        #expect(sqliteIndexes.subtracting(postgresIndexes).sorted(by: { $0.description < $1.description }) == [], "in SQLite only")
        #expect(postgresIndexes.subtracting(sqliteIndexes).sorted(by: { $0.description < $1.description }) == [], "in PostgreSQL only")
    }

    /// SQLite's declared types and PostgreSQL's, as the kind of value they hold.
    static func kind(_ type: String) -> String {
        switch type.lowercased() {
        case "text": "text"
        case "integer", "bigint", "smallint": "integer"
        case "datetime", "timestamp with time zone": "time"
        case "blob", "bytea": "bytes"
        case "boolean": "boolean"
        default: "unknown \(type)"
        }
    }

    static func schema(of database: any DatabaseReader) async throws -> (Set<Column>, Set<Index>) {
        try await database.read { db in
            var columns = Set<Column>()
            var indexes = Set<Index>()
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            for table in tables where !storeOwnTables.contains(table) {
                for row in try Row.fetchAll(db, sql: "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?)", arguments: [table]) {
                    // A primary key's column holds no NULL, however SQLite declares it.
                    let notNull = (row["notnull"] as Int) == 1 || (row["pk"] as Int) > 0
                    columns.insert(Column(table: table, name: row["name"], kind: kind(row["type"]), notNull: notNull))
                }
                for row in try Row.fetchAll(db, sql: "SELECT name, \"unique\", origin FROM pragma_index_list(?)", arguments: [table]) where (row["origin"] as String) != "pk" {
                    let indexColumns = try String.fetchAll(db, sql: "SELECT name FROM pragma_index_info(?) ORDER BY seqno", arguments: [row["name"] as String])
                    indexes.insert(Index(table: table, columns: indexColumns, unique: (row["unique"] as Int) == 1))
                }
            }
            return (columns, indexes)
        }
    }

    static func schema(of store: PostgresStore) async throws -> (Set<Column>, Set<Index>) {
        var columns = Set<Column>()
        let columnRows = try await store.query("""
            SELECT c.table_name, c.column_name, c.data_type, c.is_nullable = 'NO'
            FROM information_schema.columns c WHERE c.table_schema = current_schema()
            """)
        for row in columnRows {
            let (table, name, type, notNull) = try row.decode((String, String, String, Bool).self)
            if !storeOwnTables.contains(table) { columns.insert(Column(table: table, name: name, kind: kind(type), notNull: notNull)) }
        }
        var indexes = Set<Index>()
        let indexRows = try await store.query("""
            SELECT t.relname::text, i.indisunique,
                array_to_string(ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) k ORDER BY k), ',')
            FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
            WHERE n.nspname = current_schema() AND NOT i.indisprimary
            """)
        for row in indexRows {
            let (table, unique, definition) = try row.decode((String, Bool, String).self)
            guard !storeOwnTables.contains(table) else { continue }
            // SQLite compares emails with NOCASE; PostgreSQL indexes lower(email) for the same job.
            let indexColumns = definition.split(separator: ",").map { column in
                column.hasPrefix("lower(") && column.hasSuffix(")") ? String(column.dropFirst(6).dropLast()) : String(column)
            }
            indexes.insert(Index(table: table, columns: indexColumns, unique: unique))
        }
        return (columns, indexes)
    }
}
