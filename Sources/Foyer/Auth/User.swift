import Foundation
import GRDB

public struct User: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "users"
    public static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    public static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    public var id: Int64?
    public var email: String
    public var passwordHash: String
    public var createdAt: Date

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        id = inserted.rowID
    }

    /// What the API shows of a user: never the password hash.
    public struct Public: Codable, Sendable {
        public let id: Int64
        public let email: String
    }

    public var publicView: Public { Public(id: id ?? 0, email: email) }

    /// Users of identity providers have no local password: theirs is checked by the provider. (The value is
    /// from when Keycloak was the only one.)
    static let noLocalPassword = "!keycloak"
    var hasLocalPassword: Bool { passwordHash != Self.noLocalPassword }

    static func normalize(email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }
}

public enum UserError: Error, CustomStringConvertible {
    case invalidEmail(String)
    case passwordTooShort(minimum: Int)
    case emailTaken(String)

    public var description: String {
        switch self {
        case .invalidEmail(let email): "\"\(email)\" is not an email address"
        case .passwordTooShort(let minimum): "The password must have at least \(minimum) characters"
        case .emailTaken(let email): "An account for \(email) already exists"
        }
    }
}

/// Local accounts: email plus bcrypt password hash.
public struct UserRepository: Sendable {
    public static let minimumPasswordLength = 8
    let storage: any UserStorage
    let passwords: Passwords

    public init(store: Store, passwordHashCost: UInt8 = 12) {
        self.storage = store.userStorage
        self.passwords = Passwords(cost: passwordHashCost)
    }

    public init(database: any DatabaseWriter, passwordHashCost: UInt8 = 12) {
        self.init(store: .sqlite(database), passwordHashCost: passwordHashCost)
    }

    @discardableResult
    public func create(email rawEmail: String, password: String) async throws -> User {
        let email = User.normalize(email: rawEmail)
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard email.count <= 254, parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, !email.contains(where: \.isWhitespace) else {
            throw UserError.invalidEmail(rawEmail)
        }
        guard password.count >= Self.minimumPasswordLength else {
            throw UserError.passwordTooShort(minimum: Self.minimumPasswordLength)
        }
        let hash = try await passwords.hash(password)
        return try await storage.insert(email: email, passwordHash: hash, at: Date())
    }

    public func count() async throws -> Int {
        try await storage.count()
    }

    /// The user whose email and password match, or nil. Takes as long for an unknown email as for a wrong password.
    public func authenticate(email: String, password: String) async throws -> User? {
        let normalized = User.normalize(email: email)
        let user = try await storage.find(email: normalized)
        guard let user, user.hasLocalPassword else {
            try await passwords.verifyDecoy(password)
            return nil
        }
        return try await passwords.verify(password, hash: user.passwordHash) ? user : nil
    }
}
