import Foundation
import GRDB
import Logging
import PostgresNIO

/// The rows behind the account flows: mailed links (spent once, in the transaction that does what they are for),
/// changes to an account, its deletion, and what it holds for the export.
protocol AccountStorage: Sendable {
    /// The unspent, unexpired link with this hash, and its account (for the page a link opens; nothing changes).
    func token(hash: String, purpose: AccountTokenPurpose, now: Date) async throws -> (AccountToken, User)?
    /// The address the account asked to move to, while its link is live: the newest such.
    func pendingEmail(userId: Int64, current: String, now: Date) async throws -> String?
    /// Spends a confirmation link and confirms its address: the account's own, or the account moves to it (then
    /// every other link to that account's old address is spent too). Nil when spent, expired or unknown; throws
    /// `UserError.emailTaken` when another account took the address meanwhile.
    func confirmEmail(tokenHash: String, now: Date) async throws -> User?
    /// Spends a reset link and sets the password's new hash, with `writes` (the mail that says so), in one
    /// transaction; every other reset link of the account is spent too. Nil when the link does not count.
    func resetPassword(tokenHash: String, newHash: String, now: Date, writes: @escaping @Sendable (User) -> AccountWrites) async throws -> User?
    /// The local account with this address, when it got fewer than `cap` reset links since `since`: `writes` for it
    /// go in the same transaction. False (and nothing written) otherwise.
    func requestReset(email: String, since: Date, cap: Int, writes: @escaping @Sendable (User) -> AccountWrites) async throws -> Bool
    /// Sets what is given, with `writes`, in one transaction.
    func update(userId: Int64, name: String?, passwordHash: String?, writes: AccountWrites, now: Date) async throws
    /// The account and every row that is its (sessions, posts, tokens, devices, keys, copies: by cascade), with
    /// `writes` (the last mail) in the same transaction. The ids of the posts that went.
    func delete(userId: Int64, writes: AccountWrites, now: Date) async throws -> [Int64]
    /// Every post the account wrote, oldest first.
    func posts(userId: Int64) async throws -> [Post]
    func postCount(userId: Int64) async throws -> Int
}

extension Store {
    var accountStorage: any AccountStorage { choose(sqlite: SQLiteAccountStorage.init, postgres: PostgresAccountStorage.init) }
}

struct SQLiteAccountStorage: AccountStorage {
    let database: any DatabaseWriter

    private static func token(_ row: Row) -> AccountToken? {
        guard let purpose = AccountTokenPurpose(rawValue: row["purpose"]) else { return nil }
        return AccountToken(
            tokenHash: row["token_hash"], userId: row["user_id"], purpose: purpose, email: row["email"], createdAt: row["created_at"],
            expiresAt: row["expires_at"]
        )
    }

    private static let live = "token_hash = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?"

    func token(hash: String, purpose: AccountTokenPurpose, now: Date) async throws -> (AccountToken, User)? {
        try database.readNow { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM account_tokens WHERE \(Self.live)", arguments: [hash, purpose.rawValue, now]),
                let token = Self.token(row), let user = try SQLiteUserStorage.user(id: token.userId, db)
            else { return nil }
            return (token, user)
        }
    }

    func pendingEmail(userId: Int64, current: String, now: Date) async throws -> String? {
        try database.readNow { db in
            try String.fetchOne(db.cachedStatement(sql: """
                SELECT email FROM account_tokens WHERE user_id = ? AND purpose = ? AND used_at IS NULL AND expires_at > ? AND lower(email) <> lower(?)
                ORDER BY created_at DESC LIMIT 1
                """), arguments: [userId, AccountTokenPurpose.confirmEmail.rawValue, now, current])
        }
    }

    /// Marks the link spent, in `db`'s transaction; the link when it was live.
    private static func spend(_ hash: String, _ purpose: AccountTokenPurpose, now: Date, _ db: Database) throws -> AccountToken? {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM account_tokens WHERE \(live)", arguments: [hash, purpose.rawValue, now]),
            let token = token(row)
        else { return nil }
        try db.execute(sql: "UPDATE account_tokens SET used_at = ? WHERE token_hash = ?", arguments: [now, hash])
        return token
    }

    func confirmEmail(tokenHash: String, now: Date) async throws -> User? {
        do {
            return try await database.write { db in
                guard let token = try Self.spend(tokenHash, .confirmEmail, now: now, db), var user = try SQLiteUserStorage.user(id: token.userId, db) else {
                    return nil
                }
                if user.email.lowercased() != token.email.lowercased() {
                    try db.execute(
                        sql: "UPDATE account_tokens SET used_at = ? WHERE user_id = ? AND used_at IS NULL AND email <> ?",
                        arguments: [now, token.userId, token.email]
                    )
                    user.email = token.email
                }
                user.emailConfirmedAt = now
                try user.update(db)
                return user
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
            throw UserError.emailTaken("that address")
        }
    }

    func resetPassword(tokenHash: String, newHash: String, now: Date, writes: @escaping @Sendable (User) -> AccountWrites) async throws -> User? {
        try await database.write { db in
            guard let token = try Self.spend(tokenHash, .resetPassword, now: now, db), var user = try SQLiteUserStorage.user(id: token.userId, db) else {
                return nil
            }
            try db.execute(
                sql: "UPDATE account_tokens SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, user.id, AccountTokenPurpose.resetPassword.rawValue]
            )
            user.passwordHash = newHash
            // The link reached this address: it is the owner's.
            if user.emailConfirmedAt == nil, user.email.lowercased() == token.email.lowercased() { user.emailConfirmedAt = now }
            try user.update(db)
            try writes(user).apply(to: db, now: now)
            return user
        }
    }

    func requestReset(email: String, since: Date, cap: Int, writes: @escaping @Sendable (User) -> AccountWrites) async throws -> Bool {
        try await database.write { db in
            guard let user = try User.filter(Column("email") == email).fetchOne(db), user.hasLocalPassword else { return false }
            let recent = try Int.fetchOne(
                db, sql: "SELECT count(*) FROM account_tokens WHERE user_id = ? AND purpose = ? AND created_at > ?",
                arguments: [user.id, AccountTokenPurpose.resetPassword.rawValue, since]
            ) ?? 0
            guard recent < cap else { return false }
            try writes(user).apply(to: db, now: Date())
            return true
        }
    }

    func update(userId: Int64, name: String?, passwordHash: String?, writes: AccountWrites, now: Date) async throws {
        try await database.write { db in
            if let name { try db.execute(sql: "UPDATE users SET name = ? WHERE id = ?", arguments: [name, userId]) }
            if let passwordHash { try db.execute(sql: "UPDATE users SET password_hash = ? WHERE id = ?", arguments: [passwordHash, userId]) }
            try writes.apply(to: db, now: now)
        }
    }

    func delete(userId: Int64, writes: AccountWrites, now: Date) async throws -> [Int64] {
        try await database.write { db in
            let posts = try Int64.fetchAll(db, sql: "SELECT id FROM posts WHERE author_id = ?", arguments: [userId])
            try db.execute(sql: "DELETE FROM users WHERE id = ?", arguments: [userId])
            try writes.apply(to: db, now: now)
            return posts
        }
    }

    func posts(userId: Int64) async throws -> [Post] {
        try database.readNow { db in
            try Post.fetchAll(db, sql: "SELECT * FROM posts WHERE author_id = ? ORDER BY created_at, id", arguments: [userId])
        }
    }

    func postCount(userId: Int64) async throws -> Int {
        try database.readNow { db in try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM posts WHERE author_id = ?"), arguments: [userId]) ?? 0 }
    }
}

struct PostgresAccountStorage: AccountStorage {
    let store: PostgresStore

    private static func token(_ row: PostgresRow) throws -> AccountToken? {
        let (hash, userId, purpose, email, createdAt, expiresAt) = try row.decode((String, Int64, String, String, Date, Date).self)
        guard let purpose = AccountTokenPurpose(rawValue: purpose) else { return nil }
        return AccountToken(tokenHash: hash, userId: userId, purpose: purpose, email: email, createdAt: createdAt, expiresAt: expiresAt)
    }

    private static let tokenColumns = "token_hash, user_id, purpose, email, created_at, expires_at"

    func token(hash: String, purpose: AccountTokenPurpose, now: Date) async throws -> (AccountToken, User)? {
        guard let row = try await store.query("""
            SELECT \(unescaped: Self.tokenColumns) FROM account_tokens
            WHERE token_hash = \(hash) AND purpose = \(purpose.rawValue) AND used_at IS NULL AND expires_at > \(now)
            """).first, let token = try Self.token(row)
        else { return nil }
        let user = try await store.query("SELECT * FROM users WHERE id = \(token.userId)").first.map { try PostgresUsers.user($0.makeRandomAccess()) }
        return user.map { (token, $0) }
    }

    func pendingEmail(userId: Int64, current: String, now: Date) async throws -> String? {
        try await store.query("""
            SELECT email FROM account_tokens
            WHERE user_id = \(userId) AND purpose = \(AccountTokenPurpose.confirmEmail.rawValue) AND used_at IS NULL AND expires_at > \(now)
                AND lower(email) <> lower(\(current))
            ORDER BY created_at DESC LIMIT 1
            """).first.map { try $0.decode(String.self) }
    }

    /// Marks the link spent on `connection` (inside its transaction); the link when it was live. Two presses at
    /// once: the second waits on the row and then finds it spent.
    private static func spend(
        _ hash: String, _ purpose: AccountTokenPurpose, now: Date, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> (AccountToken, User)? {
        guard let row = try await connection.run("""
            UPDATE account_tokens SET used_at = \(now)
            WHERE token_hash = \(hash) AND purpose = \(purpose.rawValue) AND used_at IS NULL AND expires_at > \(now)
            RETURNING \(unescaped: tokenColumns)
            """, logger: logger).first, let token = try token(row),
            let userRow = try await connection.run("SELECT * FROM users WHERE id = \(token.userId) FOR UPDATE", logger: logger).first
        else { return nil }
        return (token, try PostgresUsers.user(userRow.makeRandomAccess()))
    }

    func confirmEmail(tokenHash: String, now: Date) async throws -> User? {
        let logger = store.logger
        do {
            return try await store.transaction { connection in
                guard let (token, spentFor) = try await Self.spend(tokenHash, .confirmEmail, now: now, connection, logger) else { return nil }
                var user = spentFor
                if user.email.lowercased() != token.email.lowercased() {
                    try await connection.run("""
                        UPDATE account_tokens SET used_at = \(now) WHERE user_id = \(token.userId) AND used_at IS NULL AND email <> \(token.email)
                        """, logger: logger)
                    user.email = token.email
                }
                user.emailConfirmedAt = now
                try await connection.run(
                    "UPDATE users SET email = \(user.email), email_confirmed_at = \(now) WHERE id = \(token.userId)", logger: logger
                )
                return user
            }
        } catch where PostgresStore.isUniqueViolation(error) {
            throw UserError.emailTaken("that address")
        }
    }

    func resetPassword(tokenHash: String, newHash: String, now: Date, writes: @escaping @Sendable (User) -> AccountWrites) async throws -> User? {
        let logger = store.logger
        return try await store.transaction { connection in
            guard let (token, spentFor) = try await Self.spend(tokenHash, .resetPassword, now: now, connection, logger), let id = spentFor.id else {
                return nil
            }
            var user = spentFor
            try await connection.run("""
                UPDATE account_tokens SET used_at = \(now) WHERE user_id = \(id) AND purpose = \(AccountTokenPurpose.resetPassword.rawValue) AND used_at IS NULL
                """, logger: logger)
            user.passwordHash = newHash
            if user.emailConfirmedAt == nil, user.email.lowercased() == token.email.lowercased() { user.emailConfirmedAt = now }
            try await connection.run("""
                UPDATE users SET password_hash = \(newHash), email_confirmed_at = \(user.emailConfirmedAt) WHERE id = \(id)
                """, logger: logger)
            try await writes(user).apply(to: connection, logger: logger, now: now)
            return user
        }
    }

    func requestReset(email: String, since: Date, cap: Int, writes: @escaping @Sendable (User) -> AccountWrites) async throws -> Bool {
        let logger = store.logger
        return try await store.transaction { connection in
            // FOR UPDATE: two requests at once for one address count one after the other, so the cap holds.
            guard let row = try await connection.run("SELECT * FROM users WHERE lower(email) = lower(\(email)) FOR UPDATE", logger: logger).first
            else { return false }
            let user = try PostgresUsers.user(row.makeRandomAccess())
            guard user.hasLocalPassword, let id = user.id else { return false }
            let recent = try await connection.run("""
                SELECT count(*) FROM account_tokens WHERE user_id = \(id) AND purpose = \(AccountTokenPurpose.resetPassword.rawValue) AND created_at > \(since)
                """, logger: logger)[0].decode(Int.self)
            guard recent < cap else { return false }
            try await writes(user).apply(to: connection, logger: logger, now: Date())
            return true
        }
    }

    func update(userId: Int64, name: String?, passwordHash: String?, writes: AccountWrites, now: Date) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            if let name { try await connection.run("UPDATE users SET name = \(name) WHERE id = \(userId)", logger: logger) }
            if let passwordHash { try await connection.run("UPDATE users SET password_hash = \(passwordHash) WHERE id = \(userId)", logger: logger) }
            try await writes.apply(to: connection, logger: logger, now: now)
        }
    }

    func delete(userId: Int64, writes: AccountWrites, now: Date) async throws -> [Int64] {
        let logger = store.logger
        return try await store.transaction { connection in
            let posts = try await connection.run("SELECT id FROM posts WHERE author_id = \(userId)", logger: logger).map { try $0.decode(Int64.self) }
            try await connection.run("DELETE FROM users WHERE id = \(userId)", logger: logger)
            try await writes.apply(to: connection, logger: logger, now: now)
            return posts
        }
    }

    func posts(userId: Int64) async throws -> [Post] {
        try await store.query("SELECT * FROM posts WHERE author_id = \(userId) ORDER BY created_at, id").map { row in
            try row.makeRandomAccess().decode(Post.self)
        }
    }

    func postCount(userId: Int64) async throws -> Int {
        try await store.query("SELECT count(*) FROM posts WHERE author_id = \(userId)")[0].decode(Int.self)
    }
}
