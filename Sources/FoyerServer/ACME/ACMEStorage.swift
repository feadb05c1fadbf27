import Foundation

/// Where the certificate, its key, the account's key and the challenges' answers are kept: the application's
/// database, shared by every instance, so that they serve the same certificate and only one orders it.
public struct ACMEStorage: Sendable {
    let item: @Sendable (_ name: String) async throws -> Data?
    let setItem: @Sendable (_ name: String, _ value: Data) async throws -> Void
    let removeItem: @Sendable (_ name: String) async throws -> Void
    /// Runs `body` under the lease `name` (for a minute, renewed while it runs) and says true; false, without running
    /// it, when another instance holds the lease. Where one instance is all there can be, it runs `body` at once.
    let underLease: @Sendable (_ name: String, _ body: @escaping @Sendable () async throws -> Void) async throws -> Bool

    public init(
        item: @escaping @Sendable (_ name: String) async throws -> Data?,
        setItem: @escaping @Sendable (_ name: String, _ value: Data) async throws -> Void,
        removeItem: @escaping @Sendable (_ name: String) async throws -> Void,
        underLease: @escaping @Sendable (_ name: String, _ body: @escaping @Sendable () async throws -> Void) async throws -> Bool
    ) {
        (self.item, self.setItem, self.removeItem, self.underLease) = (item, setItem, removeItem, underLease)
    }
}
