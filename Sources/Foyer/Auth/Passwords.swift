import Crypto
import Foundation
import HummingbirdBcrypt
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// bcrypt takes tens to hundreds of milliseconds: run it off the event loops, on a pool of its own bounded to half
/// the cores (at least one thread). A flood of sign-ins then queues for those threads while every other request,
/// and the file I/O that shares NIO's default pool, goes on.
struct Passwords: Sendable {
    let cost: UInt8

    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: max(1, System.coreCount / 2))
        pool.start()
        return pool
    }()

    /// Verified against when an email is unknown, at the cost real hashes have, so both failures take the same time.
    /// Made on the pool the first time it is needed (it is itself a bcrypt hash: not at start).
    private static let decoyHashes = NIOLockedValueBox([UInt8: String]())

    private static func decoyHash(cost: UInt8) -> String {
        if let hash = decoyHashes.withLockedValue({ $0[cost] }) { return hash }
        let hash = Bcrypt.hash("not a real password", cost: cost)
        decoyHashes.withLockedValue { $0[cost] = hash }
        return hash
    }

    /// bcrypt reads only a password's first 72 bytes: an 88-byte passphrase would match its own prefix. So what
    /// bcrypt hashes is the password's SHA-256 in base64 (44 bytes, no NUL), and every byte counts; such hashes
    /// carry this mark. Hashes from before it are plain bcrypt: they still verify, and are made again at the next
    /// sign-in (`isPrehashed`).
    static let prehashedMark = "$sha256"

    static func isPrehashed(_ hash: String) -> Bool { hash.hasPrefix(prehashedMark) }

    static func prehash(_ password: String) -> String {
        Data(SHA256.hash(data: Data(password.utf8))).base64EncodedString()
    }

    func hash(_ password: String) async throws -> String {
        let cost = self.cost
        return try await Self.pool.runIfActive { Self.prehashedMark + Bcrypt.hash(Self.prehash(password), cost: cost) }
    }

    func verify(_ password: String, hash: String) async throws -> Bool {
        try await Self.pool.runIfActive {
            if Self.isPrehashed(hash) { return Bcrypt.verify(Self.prehash(password), hash: String(hash.dropFirst(Self.prehashedMark.count))) }
            return Bcrypt.verify(password, hash: hash)
        }
    }

    /// Spends the time a real check would, for an email that has no account.
    func verifyDecoy(_ password: String) async throws {
        let cost = self.cost
        _ = try await Self.pool.runIfActive { Bcrypt.verify(Self.prehash(password), hash: Self.decoyHash(cost: cost)) }
    }
}
