import Foundation
import GRDB

public struct User: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "users"
    public static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    public static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    public var id: Int64?
    public var email: String
    /// What others see of this account (posts' authors): never the address.
    public var name: String
    public var passwordHash: String
    public var createdAt: Date
    /// When the owner proved the address is theirs (a mailed link; a provider's `email_verified`; an operator's
    /// `foyer user add`); nil until then.
    public var emailConfirmedAt: Date?
    /// When the owner last accepted the terms: they accepted the version in force then (`Terms.isAccepted`). Nil:
    /// never (a provider's account, one from before the terms existed).
    public var termsAcceptedAt: Date?
    /// What the account may do to others' content; nil for most people.
    public var role: Role?
    /// When a moderator suspended the account: it may not sign in, and nobody else sees its posts.
    public var suspendedAt: Date?
    /// When an operator made it (`foyer user add`, the demo account): no new-account limit holds it.
    public var vouchedAt: Date?
    /// The language the owner reads Foyer in (a BCP 47 tag, `pt-BR`): set on the account page or by the API, and at
    /// sign-up to the language it was made in. Nil: their browser's `Accept-Language` decides. Mails go out in it.
    public var locale: String?

    public enum Role: String, Codable, Sendable, CaseIterable {
        /// Works the moderation queue: removes posts, suspends and warns accounts.
        case moderator
        /// A moderator who also gives and takes roles.
        case admin
    }

    public init(
        id: Int64? = nil, email: String, name: String, passwordHash: String, createdAt: Date, emailConfirmedAt: Date? = nil,
        termsAcceptedAt: Date? = nil
    ) {
        (self.id, self.email, self.name, self.passwordHash) = (id, email, name, passwordHash)
        (self.createdAt, self.emailConfirmedAt, self.termsAcceptedAt) = (createdAt, emailConfirmedAt, termsAcceptedAt)
    }

    /// Read by column name, as `Post` is: GRDB's Codable decoding was 28 µs of a profile page.
    public init(row: Row) throws {
        id = row["id"]
        email = row["email"]
        name = row["name"]
        passwordHash = row["password_hash"]
        createdAt = row["created_at"]
        emailConfirmedAt = row["email_confirmed_at"]
        termsAcceptedAt = row["terms_accepted_at"]
        role = (row["role"] as String?).flatMap(Role.init(rawValue:))
        suspendedAt = row["suspended_at"]
        vouchedAt = row["vouched_at"]
        locale = row["locale"]
    }

    /// Moderators and admins: they see removed and held posts and work the queue.
    var moderates: Bool { role != nil }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        id = inserted.rowID
    }

    /// What anyone may see of a user (a post's author): a name and an id, never the address.
    public struct Public: Codable, Sendable {
        public let id: Int64
        public let name: String
    }

    public var publicView: Public { Public(id: id ?? 0, name: name) }

    /// What the owner sees of their own account beside their sessions: the address too.
    struct Own: Codable, Sendable {
        let id: Int64
        let name: String
        let email: String
    }

    var ownView: Own { Own(id: id ?? 0, name: name, email: email) }

    static let maximumNameLength = 100

    /// A name for an account that was given none: the address's part before `@`.
    static func defaultName(email: String) -> String {
        let local = email.split(separator: "@", maxSplits: 1).first.map(String.init) ?? email
        return local.isEmpty ? "Someone" : String(local.prefix(maximumNameLength))
    }

    /// Users of identity providers have no local password: theirs is checked by the provider. (The value is
    /// from when Keycloak was the only one.)
    static let noLocalPassword = "!keycloak"
    var hasLocalPassword: Bool { passwordHash != Self.noLocalPassword }
    /// A local account made with a passkey instead of a password: no password signs in to it until one is set by a
    /// reset mail. (Never a bcrypt hash, so no password can match it.)
    static let passkeyOnly = "!passkey"
    /// A password of its own that a sign-in may check.
    var hasPassword: Bool { hasLocalPassword && passwordHash != Self.passkeyOnly }

    static func normalize(email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }
}

public enum UserError: Error, CustomStringConvertible {
    case invalidEmail(String)
    case emailTaken(String)
    /// The password breaks a rule of `PasswordRules`: each message says which.
    case unacceptablePassword([String])

    public var description: String {
        switch self {
        case .invalidEmail(let email): "\"\(email)\" is not an email address"
        case .emailTaken(let email): "An account for \(email) already exists"
        case .unacceptablePassword(let problems): problems.map { "The password \($0)" }.joined(separator: "; ")
        }
    }
}

/// Local accounts: email, a name others see, and a password hash (see `Passwords`).
public struct UserRepository: Sendable {
    let storage: any UserStorage
    let passwords: Passwords

    public init(store: Store, passwordHashCost: UInt8 = 12) {
        self.storage = store.userStorage
        self.passwords = Passwords(cost: passwordHashCost)
    }

    public init(database: any DatabaseWriter, passwordHashCost: UInt8 = 12) {
        self.init(store: .sqlite(database), passwordHashCost: passwordHashCost)
    }

    /// An account an operator makes (`foyer user add`, the demo account): its address counts as confirmed.
    @discardableResult
    public func create(email rawEmail: String, password: String, name: String? = nil) async throws -> User {
        let email = User.normalize(email: rawEmail)
        guard Self.isEmailAddress(email) else { throw UserError.invalidEmail(rawEmail) }
        let problems = PasswordRules.problems(password, email: email)
        // Said on the command line (`foyer user add`), in the default catalog's words.
        guard problems.isEmpty else { throw UserError.unacceptablePassword(problems.map { Languages.shipped?.fallback.say($0) ?? $0.key }) }
        let hash = try await passwords.hash(password)
        let now = Date()
        let name = name.map(Self.tidy(name:)).flatMap { $0.isEmpty ? nil : $0 } ?? User.defaultName(email: email)
        // Vouched for by the operator: the terms in force now count as accepted.
        var user = User(email: email, name: name, passwordHash: hash, createdAt: now, emailConfirmedAt: now, termsAcceptedAt: now)
        user.vouchedAt = now
        return try await storage.insert(user)
    }

    /// Someone signing themselves up: every field's problems at once, Rails-style, as `ValidationFailed`
    /// (`{"email": [Phrase("errors.taken")]}`). The address waits to be confirmed.
    /// `password` nil: the account is made to sign in with a passkey, added right after (`User.passkeyOnly`).
    func signUp(
        name rawName: String, email rawEmail: String, password: String?, acceptsTerms: Bool, locale: String? = nil,
        writes: @escaping @Sendable (User) throws -> AccountWrites
    ) async throws -> User {
        let (name, email) = (Self.tidy(name: rawName), User.normalize(email: rawEmail))
        var errors = Self.nameErrors(name)
        if email.isEmpty {
            errors["email", default: []].append(Phrase("errors.blank"))
        } else if !Self.isEmailAddress(email) {
            errors["email", default: []].append(Phrase("errors.not_email"))
        }
        let problems = password.map { PasswordRules.problems($0, email: email) } ?? []
        if !problems.isEmpty { errors["password"] = problems }
        if !acceptsTerms { errors["accept_terms"] = [Phrase("errors.must_be_accepted")] }
        guard errors.isEmpty else { throw ValidationFailed(errors: errors) }
        // Hashing takes a while: an address already taken is answered without it.
        if try await storage.find(email: email) != nil { throw ValidationFailed(errors: ["email": [Phrase("errors.taken")]]) }
        let hash = if let password { try await passwords.hash(password) } else { User.passkeyOnly }
        do {
            let now = Date()
            var user = User(email: email, name: name, passwordHash: hash, createdAt: now, termsAcceptedAt: now)
            user.locale = locale
            return try await storage.insert(user, writes: writes)
        } catch UserError.emailTaken {
            throw ValidationFailed(errors: ["email": [Phrase("errors.taken")]])
        }
    }

    static func nameErrors(_ name: String) -> [String: [Phrase]] {
        if name.isEmpty { return ["name": [Phrase("errors.blank")]] }
        if name.unicodeScalars.count > User.maximumNameLength {
            return ["name": [Phrase("errors.too_long", count: User.maximumNameLength)]]
        }
        return [:]
    }

    /// Whitespace at the ends and runs of it inside (a name is one line) go.
    static func tidy(name: String) -> String {
        name.split(whereSeparator: { $0.isWhitespace || $0.isNewline }).joined(separator: " ")
    }

    static func isEmailAddress(_ email: String) -> Bool {
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        return email.count <= 254 && parts.count == 2 && !parts[0].isEmpty && parts[1].contains(".") && !parts[1].hasPrefix(".")
            && !parts[1].hasSuffix(".") && !email.contains(where: { $0.isWhitespace || $0.isNewline || $0 == "<" || $0 == ">" || $0 == "," })
    }

    public func count() async throws -> Int {
        try await storage.count()
    }

    /// Gives the account with `email` a role (nil: none); nil when no account has that address.
    public func setRole(_ role: User.Role?, email: String) async throws -> User? {
        try await storage.setRole(role, email: User.normalize(email: email))
    }

    /// The user whose email and password match, or nil. Takes as long for an unknown email as for a wrong password.
    /// A hash from before passwords were pre-hashed is made again from the password that matched it.
    public func authenticate(email: String, password: String) async throws -> User? {
        let normalized = User.normalize(email: email)
        let user = try await storage.find(email: normalized)
        guard var user, user.hasPassword, let id = user.id else {
            try await passwords.verifyDecoy(password)
            return nil
        }
        guard try await passwords.verify(password, hash: user.passwordHash) else { return nil }
        if !Passwords.isPrehashed(user.passwordHash) {
            user.passwordHash = try await passwords.hash(password)
            try await storage.setPasswordHash(user.passwordHash, userId: id)
        }
        return user
    }
}
