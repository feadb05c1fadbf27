import Foundation
import GRDB
import PostgresNIO

/// The rows behind `UserRepository` and Keycloak's accounts.
protocol UserStorage: Sendable {
    /// Throws `UserError.emailTaken` when an account has that (normalized) email.
    func insert(email: String, passwordHash: String, keycloakSubject: String?, at date: Date) async throws -> User
    func count() async throws -> Int
    func find(email: String) async throws -> User?
    func find(keycloakSubject: String) async throws -> User?
    /// Matched by `subject`, else the local account with `email` is linked (if `linkLocal` allows: returns nil
    /// when it does not), else a user is provisioned. The email becomes `newEmail` when given and free.
    func keycloakUser(subject: String, email: String, newEmail: String?, linkLocal: @escaping @Sendable (User) -> Bool) async throws -> User?
}

extension Store {
    var userStorage: any UserStorage { choose(sqlite: SQLiteUserStorage.init, postgres: PostgresUserStorage.init) }
}

struct SQLiteUserStorage: UserStorage {
    let database: any DatabaseWriter

    func insert(email: String, passwordHash: String, keycloakSubject: String?, at date: Date) async throws -> User {
        do {
            return try await database.write { db in
                var user = User(id: nil, email: email, passwordHash: passwordHash, createdAt: date, keycloakSubject: keycloakSubject)
                try user.insert(db)
                return user
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
            throw UserError.emailTaken(email)
        }
    }

    func count() async throws -> Int {
        try database.readNow { try User.fetchCount($0) }
    }

    func find(email: String) async throws -> User? {
        try database.readStatementNow { db in try User.filter(Column("email") == email).fetchOne(db) }
    }

    func find(keycloakSubject: String) async throws -> User? {
        try database.readStatementNow { db in try User.filter(Column("keycloak_subject") == keycloakSubject).fetchOne(db) }
    }

    func keycloakUser(subject: String, email: String, newEmail: String?, linkLocal: @escaping @Sendable (User) -> Bool) async throws -> User? {
        try await database.write { db in
            if var user = try User.filter(Column("keycloak_subject") == subject).fetchOne(db) {
                if let newEmail, user.email != newEmail,
                    try User.filter(Column("email") == newEmail && Column("id") != user.id).fetchCount(db) == 0
                {
                    user.email = newEmail
                    try user.update(db)
                }
                return user
            }
            if var local = try User.filter(Column("email") == email).fetchOne(db) {
                guard linkLocal(local) else { return nil }
                local.keycloakSubject = subject
                try local.update(db)
                return local
            }
            var user = User(id: nil, email: email, passwordHash: User.noLocalPassword, createdAt: Date(), keycloakSubject: subject)
            try user.insert(db)
            return user
        }
    }
}

/// Reading users out of PostgreSQL rows, here and in joins of other tables.
enum PostgresUsers {
    /// The user columns of a join, renamed with `prefix` so they cannot clash with the other table's.
    static func columns(as prefix: String) -> String {
        ["id", "email", "password_hash", "created_at", "keycloak_subject"].map { "users.\($0) AS \(prefix)\($0)" }.joined(separator: ", ")
    }

    static func user(_ row: PostgresRandomAccessRow, prefix: String = "") throws -> User {
        try row.decode(User.self, prefix: prefix)
    }
}

struct PostgresUserStorage: UserStorage {
    let store: PostgresStore

    func insert(email: String, passwordHash: String, keycloakSubject: String?, at date: Date) async throws -> User {
        do {
            let rows = try await store.query("""
                INSERT INTO users (email, password_hash, created_at, keycloak_subject)
                VALUES (\(email), \(passwordHash), \(date), \(keycloakSubject)) RETURNING id
                """)
            let id = try rows[0].decode(Int64.self)
            return User(id: id, email: email, passwordHash: passwordHash, createdAt: date, keycloakSubject: keycloakSubject)
        } catch where PostgresStore.isUniqueViolation(error) {
            throw UserError.emailTaken(email)
        }
    }

    func count() async throws -> Int {
        try await store.query("SELECT count(*) FROM users")[0].decode(Int.self)
    }

    func find(email: String) async throws -> User? {
        try await store.query("SELECT * FROM users WHERE lower(email) = lower(\(email))").first.map { try PostgresUsers.user($0.makeRandomAccess()) }
    }

    func find(keycloakSubject: String) async throws -> User? {
        try await store.query("SELECT * FROM users WHERE keycloak_subject = \(keycloakSubject)").first.map { try PostgresUsers.user($0.makeRandomAccess()) }
    }

    func keycloakUser(subject: String, email: String, newEmail: String?, linkLocal: @escaping @Sendable (User) -> Bool) async throws -> User? {
        let logger = store.logger
        return try await store.transaction { connection in
            // Two first sign-ins of one realm user at once: the second waits here and then finds the first's row.
            try await connection.run("SELECT pg_advisory_xact_lock(hashtext(\(subject)))", logger: logger)
            if let row = try await connection.run("SELECT * FROM users WHERE keycloak_subject = \(subject)", logger: logger).first {
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
            if let row = try await connection.run("SELECT * FROM users WHERE lower(email) = lower(\(email)) FOR UPDATE", logger: logger).first {
                var local = try PostgresUsers.user(row.makeRandomAccess())
                guard linkLocal(local) else { return nil }
                try await connection.run("UPDATE users SET keycloak_subject = \(subject) WHERE id = \(local.id)", logger: logger)
                local.keycloakSubject = subject
                return local
            }
            let now = Date()
            let id = try await connection.run("""
                INSERT INTO users (email, password_hash, created_at, keycloak_subject)
                VALUES (\(email), \(User.noLocalPassword), \(now), \(subject)) RETURNING id
                """, logger: logger)[0].decode(Int64.self)
            return User(id: id, email: email, passwordHash: User.noLocalPassword, createdAt: now, keycloakSubject: subject)
        }
    }
}
