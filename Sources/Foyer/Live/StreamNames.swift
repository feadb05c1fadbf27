import Crypto
import Foundation
import GRDB

/// Stream names as pages embed them, signed the way turbo-rails signs them: `base64url(name)--hex(HMAC-SHA256)`.
/// A stream URL cannot be guessed or forged without the server's secret, and one altered character breaks it.
struct StreamNames: Sendable {
    private let key: SymmetricKey

    init(secret: Data) {
        key = SymmetricKey(data: secret)
    }

    func signed(_ name: String) -> String {
        let encoded = Data(name.utf8).base64URLEncoded
        return encoded + "--" + signature(of: encoded)
    }

    /// The name a signed one stands for; nil when the signature is not ours.
    func verify(_ signed: String) -> String? {
        guard let separator = signed.range(of: "--", options: .backwards) else { return nil }
        let encoded = signed[..<separator.lowerBound]
        let presented = signed[separator.upperBound...]
        guard CSRFMiddleware.constantTimeEquals(String(presented), signature(of: encoded)),
            let data = Data(base64URLEncoded: encoded)
        else { return nil }
        return String(data: data, encoding: .utf8)
    }

    private func signature(of encoded: some StringProtocol) -> String {
        HMAC<SHA256>.authenticationCode(for: Data(encoded.utf8), using: key).hexString
    }

    /// The configured secret, or the one this database keeps: generated on first start, so signed names stay valid
    /// across restarts (an open page reconnects with the name it was given).
    static func secret(configured: String?, store: Store) async throws -> Data {
        if let configured, !configured.isEmpty { return Data(configured.utf8) }
        return try await store.serverSecret(named: "stream_names")
    }
}
