import Foundation
import GRDB
import Logging
import PostgresNIO

/// A mail waiting in the outbox, and how its sending has gone so far.
struct QueuedMail: Sendable {
    let id: Int64
    let mail: OutgoingMail
    let attempts: Int
    let createdAt: Date
}

/// The rows of `mail_outbox`. Mail is written by what causes it, in that transaction (`insert`); the sender
/// claims what is due, so that with several instances each mail is taken by one of them, and a claim left by an
/// instance that died lapses and the mail is taken again.
protocol MailOutboxStorage: Sendable {
    /// Up to `limit` mails due by `now`, oldest first, claimed until `claimUntil`.
    func claimDue(now: Date, limit: Int, claimUntil: Date) async throws -> [QueuedMail]
    /// Taken by the server, or given up: it goes.
    func remove(id: Int64) async throws
    /// Not taken this time: tried again at `at`.
    func retry(id: Int64, at: Date, error: String) async throws
    func count() async throws -> Int
}

extension Store {
    var mailOutboxStorage: any MailOutboxStorage { choose(sqlite: SQLiteMailOutbox.init, postgres: PostgresMailOutbox.init) }
}

/// Writing mail into the outbox inside another write's transaction.
enum MailOutboxRows {
    static func insert(_ mail: OutgoingMail, into db: Database, now: Date) throws {
        try db.execute(
            sql: """
                INSERT INTO mail_outbox (message_id, recipient, recipient_name, subject, text_body, html_body, next_attempt_at, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [mail.messageID, mail.recipient, mail.recipientName, mail.subject, mail.text, mail.html, now, now]
        )
    }

    static func insert(_ mail: OutgoingMail, into connection: PostgresConnection, logger: Logger, now: Date) async throws {
        try await connection.run("""
            INSERT INTO mail_outbox (message_id, recipient, recipient_name, subject, text_body, html_body, next_attempt_at, created_at)
            VALUES (\(mail.messageID), \(mail.recipient), \(mail.recipientName), \(mail.subject), \(mail.text), \(mail.html), \(now), \(now))
            """, logger: logger)
    }
}

struct SQLiteMailOutbox: MailOutboxStorage {
    let database: any DatabaseWriter

    func claimDue(now: Date, limit: Int, claimUntil: Date) async throws -> [QueuedMail] {
        try await database.write { db in
            let rows = try Row.fetchAll(db, sql: """
                SELECT * FROM mail_outbox WHERE next_attempt_at <= ? AND (claimed_until IS NULL OR claimed_until < ?) ORDER BY id LIMIT ?
                """, arguments: [now, now, limit])
            let mails = rows.map { row in
                QueuedMail(
                    id: row["id"],
                    mail: OutgoingMail(
                        messageID: row["message_id"], recipient: row["recipient"], recipientName: row["recipient_name"], subject: row["subject"],
                        text: row["text_body"], html: row["html_body"]
                    ),
                    attempts: row["attempts"], createdAt: row["created_at"]
                )
            }
            for mail in mails {
                try db.execute(sql: "UPDATE mail_outbox SET claimed_until = ? WHERE id = ?", arguments: [claimUntil, mail.id])
            }
            return mails
        }
    }

    func remove(id: Int64) async throws {
        try await database.write { db in try db.execute(sql: "DELETE FROM mail_outbox WHERE id = ?", arguments: [id]) }
    }

    func retry(id: Int64, at: Date, error: String) async throws {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE mail_outbox SET attempts = attempts + 1, next_attempt_at = ?, claimed_until = NULL, last_error = ? WHERE id = ?",
                arguments: [at, error, id]
            )
        }
    }

    func count() async throws -> Int {
        try database.readNow { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM mail_outbox") ?? 0 }
    }
}

struct PostgresMailOutbox: MailOutboxStorage {
    let store: PostgresStore

    func claimDue(now: Date, limit: Int, claimUntil: Date) async throws -> [QueuedMail] {
        // SKIP LOCKED: two instances claiming at once take different mails instead of waiting for each other.
        let rows = try await store.query("""
            UPDATE mail_outbox SET claimed_until = \(claimUntil) WHERE id IN (
                SELECT id FROM mail_outbox WHERE next_attempt_at <= \(now) AND (claimed_until IS NULL OR claimed_until < \(now))
                ORDER BY id LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ) RETURNING id, message_id, recipient, recipient_name, subject, text_body, html_body, attempts, created_at
            """)
        return try rows.map { row in
            let (id, messageID, recipient, name, subject, text, html, attempts, createdAt) = try row.decode(
                (Int64, String, String, String, String, String, String, Int, Date).self
            )
            let mail = OutgoingMail(messageID: messageID, recipient: recipient, recipientName: name, subject: subject, text: text, html: html)
            return QueuedMail(id: id, mail: mail, attempts: attempts, createdAt: createdAt)
        }.sorted { $0.id < $1.id }
    }

    func remove(id: Int64) async throws {
        try await store.query("DELETE FROM mail_outbox WHERE id = \(id)")
    }

    func retry(id: Int64, at: Date, error: String) async throws {
        try await store.query("""
            UPDATE mail_outbox SET attempts = attempts + 1, next_attempt_at = \(at), claimed_until = NULL, last_error = \(error) WHERE id = \(id)
            """)
    }

    func count() async throws -> Int {
        try await store.query("SELECT count(*) FROM mail_outbox")[0].decode(Int.self)
    }
}
