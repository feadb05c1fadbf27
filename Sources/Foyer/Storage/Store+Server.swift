import Foundation
import GRDB

/// What belongs to the server rather than to a feature: whether the store answers, and secrets it makes itself.
extension Store {
    /// Throws when the store cannot answer a query now.
    func ping() async throws {
        switch self {
        case .sqlite(let database): _ = try database.readNow { try Int.fetchOne($0, sql: "SELECT 1") }
        case .postgres(let store): try await store.query("SELECT 1")
        }
    }

    /// The secret stored under `name`, made (32 random bytes) and kept on first use. Instances sharing a
    /// database get the first one's: whichever inserts first wins, the others read its row. Read first: every start
    /// asks for its secrets, and only the very first needs to write.
    func serverSecret(named name: String) async throws -> Data {
        switch self {
        case .sqlite(let database):
            if let stored = try database.readNow({ db in try Data.fetchOne(db, sql: "SELECT value FROM server_secrets WHERE name = ?", arguments: [name]) }) {
                return stored
            }
        case .postgres(let store):
            if let stored = try await store.query("SELECT value FROM server_secrets WHERE name = \(name)").first?.decode(Data.self) { return stored }
        }
        var generator = SystemRandomNumberGenerator()
        let fresh = Data((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
        switch self {
        case .sqlite(let database):
            return try await database.write { db in
                if let stored = try Data.fetchOne(db, sql: "SELECT value FROM server_secrets WHERE name = ?", arguments: [name]) {
                    return stored
                }
                try db.execute(sql: "INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?)", arguments: [name, fresh, Date()])
                return fresh
            }
        case .postgres(let store):
            try await store.query("INSERT INTO server_secrets (name, value, created_at) VALUES (\(name), \(fresh), \(Date())) ON CONFLICT DO NOTHING")
            return try await store.query("SELECT value FROM server_secrets WHERE name = \(name)")[0].decode(Data.self)
        }
    }
}
