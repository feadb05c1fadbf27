import Crypto
import Foundation
import GRDB
import Logging
import PostgresNIO

/// What a mailed link does when its button is pressed.
enum AccountTokenPurpose: String, Sendable {
    /// Prove an address is yours: the account's own, or the one it is changing to.
    case confirmEmail = "confirm_email"
    case resetPassword = "reset_password"

    var lifetime: TimeInterval {
        switch self {
        case .confirmEmail: 3 * 24 * 60 * 60
        case .resetPassword: 60 * 60
        }
    }
}

/// A link mailed to someone. Only the SHA-256 of its secret is kept: a leaked database opens no account.
struct AccountToken: Sendable {
    let tokenHash: String
    let userId: Int64
    let purpose: AccountTokenPurpose
    /// The address the link was sent to (for a change of address: the new one).
    let email: String
    let createdAt: Date
    let expiresAt: Date

    /// A new link's secret (what the URL carries) and its row.
    static func issue(for userId: Int64, purpose: AccountTokenPurpose, email: String, now: Date = Date()) -> (secret: String, token: AccountToken) {
        let secret = SessionRepository.randomToken()
        let token = AccountToken(
            tokenHash: hash(secret), userId: userId, purpose: purpose, email: email, createdAt: now, expiresAt: now.addingTimeInterval(purpose.lifetime)
        )
        return (secret, token)
    }

    static func hash(_ secret: String) -> String {
        SHA256.hash(data: Data(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

/// What an account change writes beside itself, in its own transaction: the links it mails and the mail.
struct AccountWrites: Sendable {
    var tokens: [AccountToken] = []
    var mails: [OutgoingMail] = []

    static func + (lhs: AccountWrites, rhs: AccountWrites) -> AccountWrites {
        AccountWrites(tokens: lhs.tokens + rhs.tokens, mails: lhs.mails + rhs.mails)
    }

    func apply(to db: Database, now: Date) throws {
        for token in tokens {
            try db.execute(
                sql: "INSERT INTO account_tokens (token_hash, user_id, purpose, email, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [token.tokenHash, token.userId, token.purpose.rawValue, token.email, token.createdAt, token.expiresAt]
            )
        }
        for mail in mails { try MailOutboxRows.insert(mail, into: db, now: now) }
    }

    func apply(to connection: PostgresConnection, logger: Logger, now: Date) async throws {
        for token in tokens {
            try await connection.run("""
                INSERT INTO account_tokens (token_hash, user_id, purpose, email, created_at, expires_at)
                VALUES (\(token.tokenHash), \(token.userId), \(token.purpose.rawValue), \(token.email), \(token.createdAt), \(token.expiresAt))
                """, logger: logger)
        }
        for mail in mails { try await MailOutboxRows.insert(mail, into: connection, logger: logger, now: now) }
    }
}
