import Foundation
import GRDB
import PostgresNIO

/// Documents Apollo clients registered by their SHA-256 (automatic persisted queries), so they can send the hash
/// alone afterwards. Kept in the store, which the instances share, so a client that registered a document through
/// one instance can send its hash to another; the ones in use are also kept in memory.
final class PersistedDocuments: Sendable {
    /// The store keeps at most this many, dropping the longest unused (an app has tens or hundreds of operations).
    static let maximumDocuments = 2_000
    /// Longer documents run but are not kept: the client keeps sending them whole, as it would without APQ.
    static let maximumDocumentCharacters = 64 << 10

    let storage: any PersistedDocumentStorage
    private let recent = StartOverCache<String, String>(maximumCost: 8 << 20)

    init(storage: any PersistedDocumentStorage) {
        self.storage = storage
    }

    /// The document registered under `hash` (64 lowercase hex digits), or nil.
    func document(hash: String) async throws -> String? {
        if let known = recent.value(for: hash) { return known }
        guard let document = try await storage.document(hash: hash, usedAt: Date()) else { return nil }
        recent.keep(document, for: hash, cost: document.utf8.count)
        return document
    }

    /// Keeps `document` under its hash, which the caller checked is its SHA-256.
    func register(_ document: String, hash: String) async throws {
        guard recent.value(for: hash) == nil, document.utf8.count <= Self.maximumDocumentCharacters else { return }
        try await storage.keep(document, hash: hash, at: Date(), keepingAtMost: Self.maximumDocuments)
        recent.keep(document, for: hash, cost: document.utf8.count)
    }

    /// The hex SHA-256 of a document's text, as Apollo clients compute it.
    static func hash(of document: String) -> String {
        document.sha256Hex
    }

    /// What Apollo clients send: 64 hex digits (compared lowercased).
    static func isHash(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) || (0x41...0x46).contains($0) }
    }
}

/// The rows behind `PersistedDocuments`.
protocol PersistedDocumentStorage: Sendable {
    /// The document under `hash`, marked used at `usedAt`; nil when there is none.
    func document(hash: String, usedAt: Date) async throws -> String?
    /// Stores the document (or marks it used), then drops the longest unused beyond `limit`.
    func keep(_ document: String, hash: String, at date: Date, keepingAtMost limit: Int) async throws
}

extension Store {
    var persistedDocumentStorage: any PersistedDocumentStorage {
        choose(sqlite: SQLitePersistedDocumentStorage.init, postgres: PostgresPersistedDocumentStorage.init)
    }
}

struct SQLitePersistedDocumentStorage: PersistedDocumentStorage {
    let database: any DatabaseWriter

    func document(hash: String, usedAt: Date) async throws -> String? {
        try await database.write { db in
            try String.fetchOne(db, sql: "UPDATE graphql_documents SET used_at = ? WHERE hash = ? RETURNING body", arguments: [usedAt, hash])
        }
    }

    func keep(_ document: String, hash: String, at date: Date, keepingAtMost limit: Int) async throws {
        try await database.write { db in
            try db.execute(
                sql: "INSERT INTO graphql_documents (hash, body, used_at) VALUES (?, ?, ?) ON CONFLICT (hash) DO UPDATE SET used_at = excluded.used_at",
                arguments: [hash, document, date]
            )
            try db.execute(
                sql: "DELETE FROM graphql_documents WHERE hash IN (SELECT hash FROM graphql_documents ORDER BY used_at DESC LIMIT -1 OFFSET ?)",
                arguments: [limit]
            )
        }
    }
}

struct PostgresPersistedDocumentStorage: PersistedDocumentStorage {
    let store: PostgresStore

    func document(hash: String, usedAt: Date) async throws -> String? {
        try await store.query("UPDATE graphql_documents SET used_at = \(usedAt) WHERE hash = \(hash) RETURNING body")
            .first?.decode(String.self)
    }

    func keep(_ document: String, hash: String, at date: Date, keepingAtMost limit: Int) async throws {
        try await store.query("""
            INSERT INTO graphql_documents (hash, body, used_at) VALUES (\(hash), \(document), \(date))
            ON CONFLICT (hash) DO UPDATE SET used_at = excluded.used_at
            """)
        try await store.query("""
            DELETE FROM graphql_documents WHERE hash IN (SELECT hash FROM graphql_documents ORDER BY used_at DESC OFFSET \(limit))
            """)
    }
}
