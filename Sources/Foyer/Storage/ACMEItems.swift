import Foundation
import FoyerServer
import GRDB
import PostgresNIO

extension Store {
    /// The ACME certificates' items in the `acme_items` table, and PostgreSQL's leases for the one instance that
    /// orders (on SQLite there is one instance).
    public var acmeStorage: ACMEStorage {
        ACMEStorage(
            item: { name in try await acmeItem(name) },
            setItem: { name, value in try await setACMEItem(name, value) },
            removeItem: { name in try await removeACMEItem(name) },
            underLease: { name, body in try await exclusively(name, term: .seconds(60), waitingUpTo: nil, body) != nil }
        )
    }

    func acmeItem(_ name: String) async throws -> Data? {
        switch self {
        case .sqlite(let database):
            return try database.readNow { db in try Data.fetchOne(db, sql: "SELECT value FROM acme_items WHERE name = ?", arguments: [name]) }
        case .postgres(let postgres):
            return try await postgres.query("SELECT value FROM acme_items WHERE name = \(name)").first?.decode(Data.self)
        }
    }

    func setACMEItem(_ name: String, _ value: Data) async throws {
        switch self {
        case .sqlite(let database):
            try await database.write { db in
                try db.execute(
                    sql: "INSERT INTO acme_items (name, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    arguments: [name, value, Date()]
                )
            }
        case .postgres(let postgres):
            try await postgres.query("""
                INSERT INTO acme_items (name, value, updated_at) VALUES (\(name), \(value), \(Date()))
                ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at
                """)
        }
    }

    func removeACMEItem(_ name: String) async throws {
        switch self {
        case .sqlite(let database): try await database.write { db in try db.execute(sql: "DELETE FROM acme_items WHERE name = ?", arguments: [name]) }
        case .postgres(let postgres): try await postgres.query("DELETE FROM acme_items WHERE name = \(name)")
        }
    }
}
