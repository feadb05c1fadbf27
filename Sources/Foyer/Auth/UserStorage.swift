import Foundation
import GRDB
import PostgresNIO

/// The rows behind `UserRepository` and the accounts of identity providers (`user_identities`: provider, `sub`).
protocol UserStorage: Sendable {
    /// The user with its id, and in the same transaction what `writes` asks for it (the mail a sign-up sends).
    /// Throws `UserError.emailTaken` when an account has that (normalized) email.
    func insert(_ user: User, writes: @escaping @Sendable (User) throws -> AccountWrites) async throws -> User
    func count() async throws -> Int
    func find(email: String) async throws -> User?
    func find(id: Int64) async throws -> User?
    /// A hash made again (a pre-hashed one replacing bcrypt's own at sign-in).
    func setPasswordHash(_ hash: String, userId: Int64) async throws
    /// The language the account reads Foyer in; nil: its browser's.
    func setLocale(_ locale: String?, userId: Int64) async throws
    /// The account with that (normalized) address, given `role`; nil when there is none.
    func setRole(_ role: User.Role?, email: String) async throws -> User?
    func find(provider: String, subject: String) async throws -> User?
    /// Matched by provider and `subject`; else the user who has `email` is linked when `link(user, hasIdentities)`
    /// allows (else nil), else a user is provisioned (named `name`, the address confirmed when `emailVerified`): with
    /// `email`, or with `separateEmail` when `email` belongs to a user that could not be linked because another
    /// provider's identity holds it. The email becomes `newEmail` when given and free.
    func providerUser(
        provider: String, subject: String, email: String, newEmail: String?, separateEmail: String, name: String, emailVerified: Bool,
        link: @escaping @Sendable (User, _ hasIdentities: Bool) -> Bool
    ) async throws -> User?
}

extension UserStorage {
    func insert(_ user: User) async throws -> User { try await insert(user) { _ in AccountWrites() } }
}

extension Store {
    var userStorage: any UserStorage { choose(sqlite: SQLiteUserStorage.init, postgres: PostgresUserStorage.init) }
}

struct SQLiteUserStorage: UserStorage {
    let database: any DatabaseWriter

    func insert(_ user: User, writes: @escaping @Sendable (User) throws -> AccountWrites) async throws -> User {
        do {
            return try await database.write { db in
                var user = user
                try user.insert(db)
                try writes(user).apply(to: db, now: user.createdAt)
                return user
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
            throw UserError.emailTaken(user.email)
        }
    }

    func find(id: Int64) async throws -> User? {
        try database.readStatementNow { db in try Self.user(id: id, db) }
    }

    /// Through a statement kept prepared: GRDB's `fetchOne(db, key:)` compiles its SQL every time, 75 µs of a
    /// profile page.
    static func user(id: Int64, _ db: Database) throws -> User? {
        try User.fetchOne(db.cachedStatement(sql: "SELECT * FROM users WHERE id = ?"), arguments: [id])
    }

    func setPasswordHash(_ hash: String, userId: Int64) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE users SET password_hash = ? WHERE id = ?", arguments: [hash, userId])
        }
    }

    func setLocale(_ locale: String?, userId: Int64) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE users SET locale = ? WHERE id = ?", arguments: [locale, userId])
        }
    }

    func count() async throws -> Int {
        try database.readNow { try User.fetchCount($0) }
    }

    func setRole(_ role: User.Role?, email: String) async throws -> User? {
        try await database.write { db in
            guard var user = try User.filter(Column("email") == email).fetchOne(db) else { return nil }
            user.role = role
            try user.update(db, columns: ["role"])
            return user
        }
    }

    func find(email: String) async throws -> User? {
        try database.readStatementNow { db in try User.filter(Column("email") == email).fetchOne(db) }
    }

    private static let byIdentity = "SELECT users.* FROM users JOIN user_identities i ON i.user_id = users.id WHERE i.provider = ? AND i.subject = ?"

    func find(provider: String, subject: String) async throws -> User? {
        try database.readStatementNow { db in try User.fetchOne(db, sql: Self.byIdentity, arguments: [provider, subject]) }
    }

    func providerUser(
        provider: String, subject: String, email: String, newEmail: String?, separateEmail: String, name: String, emailVerified: Bool,
        link: @escaping @Sendable (User, _ hasIdentities: Bool) -> Bool
    ) async throws -> User? {
        try await database.write { db in
            if var user = try User.fetchOne(db, sql: Self.byIdentity, arguments: [provider, subject]) {
                if let newEmail, user.email != newEmail,
                    try User.filter(Column("email") == newEmail && Column("id") != user.id).fetchCount(db) == 0
                {
                    user.email = newEmail
                    try user.update(db)
                }
                return user
            }
            var email = email
            if let existing = try User.filter(Column("email") == email).fetchOne(db), let id = existing.id {
                let hasIdentities = try Int.fetchOne(db, sql: "SELECT count(*) FROM user_identities WHERE user_id = ?", arguments: [id]) ?? 0 > 0
                if link(existing, hasIdentities) {
                    try db.execute(sql: "INSERT INTO user_identities (provider, subject, user_id) VALUES (?, ?, ?)", arguments: [provider, subject, id])
                    return existing
                }
                guard hasIdentities else { return nil }
                email = separateEmail
            }
            let now = Date()
            var user = User(email: email, name: name, passwordHash: User.noLocalPassword, createdAt: now, emailConfirmedAt: emailVerified ? now : nil)
            try user.insert(db)
            try db.execute(sql: "INSERT INTO user_identities (provider, subject, user_id) VALUES (?, ?, ?)", arguments: [provider, subject, user.id])
            return user
        }
    }
}

/// Reading users out of PostgreSQL rows, here and in joins of other tables.
enum PostgresUsers {
    /// The user columns of a join, renamed with `prefix` so they cannot clash with the other table's.
    static func columns(as prefix: String) -> String {
        [
            "id", "email", "name", "password_hash", "created_at", "email_confirmed_at", "terms_accepted_at", "role", "suspended_at", "vouched_at",
            "locale",
        ].map { "users.\($0) AS \(prefix)\($0)" }.joined(separator: ", ")
    }

    static func user(_ row: PostgresRandomAccessRow, prefix: String = "") throws -> User {
        try row.decode(User.self, prefix: prefix)
    }
}

struct PostgresUserStorage: UserStorage {
    let store: PostgresStore

    func insert(_ user: User, writes: @escaping @Sendable (User) throws -> AccountWrites) async throws -> User {
        let logger = store.logger
        do {
            return try await store.transaction { connection in
                let rows = try await connection.run("""
                    INSERT INTO users (email, name, password_hash, created_at, email_confirmed_at, terms_accepted_at, vouched_at, locale)
                    VALUES (\(user.email), \(user.name), \(user.passwordHash), \(user.createdAt), \(user.emailConfirmedAt),
                    \(user.termsAcceptedAt), \(user.vouchedAt), \(user.locale)) RETURNING id
                    """, logger: logger)
                var inserted = user
                inserted.id = try rows[0].decode(Int64.self)
                try await writes(inserted).apply(to: connection, logger: logger, now: user.createdAt)
                return inserted
            }
        } catch where PostgresStore.isUniqueViolation(error) {
            throw UserError.emailTaken(user.email)
        }
    }

    func find(id: Int64) async throws -> User? {
        try await store.query("SELECT * FROM users WHERE id = \(id)").first.map { try PostgresUsers.user($0.makeRandomAccess()) }
    }

    func setPasswordHash(_ hash: String, userId: Int64) async throws {
        try await store.query("UPDATE users SET password_hash = \(hash) WHERE id = \(userId)")
    }

    func setLocale(_ locale: String?, userId: Int64) async throws {
        try await store.query("UPDATE users SET locale = \(locale) WHERE id = \(userId)")
    }

    func count() async throws -> Int {
        try await store.query("SELECT count(*) FROM users")[0].decode(Int.self)
    }

    func setRole(_ role: User.Role?, email: String) async throws -> User? {
        try await store.query("UPDATE users SET role = \(role?.rawValue) WHERE lower(email) = lower(\(email)) RETURNING *").first.map {
            try PostgresUsers.user($0.makeRandomAccess())
        }
    }

    func find(email: String) async throws -> User? {
        try await store.query("SELECT * FROM users WHERE lower(email) = lower(\(email))").first.map { try PostgresUsers.user($0.makeRandomAccess()) }
    }

    func find(provider: String, subject: String) async throws -> User? {
        try await store.query("""
            SELECT users.* FROM users JOIN user_identities i ON i.user_id = users.id WHERE i.provider = \(provider) AND i.subject = \(subject)
            """).first.map { try PostgresUsers.user($0.makeRandomAccess()) }
    }

    func providerUser(
        provider: String, subject: String, email: String, newEmail: String?, separateEmail: String, name: String, emailVerified: Bool,
        link: @escaping @Sendable (User, _ hasIdentities: Bool) -> Bool
    ) async throws -> User? {
        let logger = store.logger
        return try await store.transaction { connection in
            // Two first sign-ins of one provider user at once: the second waits here and then finds the first's row.
            try await connection.run("SELECT pg_advisory_xact_lock(hashtext(\(provider + " " + subject)))", logger: logger)
            if let row = try await connection.run("""
                SELECT users.* FROM users JOIN user_identities i ON i.user_id = users.id WHERE i.provider = \(provider) AND i.subject = \(subject)
                """, logger: logger).first
            {
                var user = try PostgresUsers.user(row.makeRandomAccess())
                if let newEmail, user.email != newEmail {
                    let moved = try await connection.run("""
                        UPDATE users SET email = \(newEmail) WHERE id = \(user.id) AND NOT EXISTS
                        (SELECT 1 FROM users WHERE lower(email) = lower(\(newEmail)) AND id <> \(user.id)) RETURNING id
                        """, logger: logger)
                    if !moved.isEmpty { user.email = newEmail }
                }
                return user
            }
            var email = email
            if let row = try await connection.run("SELECT * FROM users WHERE lower(email) = lower(\(email)) FOR UPDATE", logger: logger).first {
                let existing = try PostgresUsers.user(row.makeRandomAccess())
                let hasIdentities = try await connection.run(
                    "SELECT count(*) FROM user_identities WHERE user_id = \(existing.id)", logger: logger
                )[0].decode(Int.self) > 0
                if link(existing, hasIdentities) {
                    try await connection.run(
                        "INSERT INTO user_identities (provider, subject, user_id) VALUES (\(provider), \(subject), \(existing.id))", logger: logger
                    )
                    return existing
                }
                guard hasIdentities else { return nil }
                email = separateEmail
            }
            let now = Date()
            let confirmedAt: Date? = emailVerified ? now : nil
            let id = try await connection.run("""
                INSERT INTO users (email, name, password_hash, created_at, email_confirmed_at)
                VALUES (\(email), \(name), \(User.noLocalPassword), \(now), \(confirmedAt)) RETURNING id
                """, logger: logger)[0].decode(Int64.self)
            try await connection.run("INSERT INTO user_identities (provider, subject, user_id) VALUES (\(provider), \(subject), \(id))", logger: logger)
            return User(id: id, email: email, name: name, passwordHash: User.noLocalPassword, createdAt: now, emailConfirmedAt: confirmedAt)
        }
    }
}
