import HummingbirdBcrypt
import NIOPosix

/// bcrypt takes tens to hundreds of milliseconds: run it on the blocking thread pool, never on an event loop.
struct Passwords: Sendable {
    let cost: UInt8

    /// Verified against when an email is unknown, so both failures cost the same time.
    /// Only ever touched on the thread pool: making it is itself a bcrypt hash.
    private static let decoyHash = Bcrypt.hash("not a real password", cost: 12)

    func hash(_ password: String) async throws -> String {
        let cost = self.cost
        return try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
    }

    func verify(_ password: String, hash: String) async throws -> Bool {
        try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
    }

    /// Spends the time a real check would, for an email that has no account.
    func verifyDecoy(_ password: String) async throws {
        _ = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: Self.decoyHash) }
    }
}
