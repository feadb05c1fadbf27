import Crypto
import CryptoExtras
import Foundation

/// A credential's public key as the authenticator gave it (a COSE_Key, RFC 9052/9053), for the three algorithms
/// Foyer offers: ES256 (-7), EdDSA with Ed25519 (-8) and RS256 (-257).
struct COSEKey: Sendable {
    enum Algorithm: Int, Sendable, CaseIterable {
        case es256 = -7
        case edDSA = -8
        case rs256 = -257
    }

    private enum Key {
        case p256(P256.Signing.PublicKey)
        case ed25519(Curve25519.Signing.PublicKey)
        case rsa(_RSA.Signing.PublicKey)
    }

    let algorithm: Algorithm
    private let key: Key

    /// `bytes`: the key's CBOR, as stored.
    init(_ bytes: [UInt8]) throws {
        let map = try CBOR.decode(bytes)
        guard let alg = map[3]?.int, let algorithm = Algorithm(rawValue: alg) else {
            throw WebAuthnRefusal("the credential's key uses an algorithm Foyer does not accept (it offers ES256, EdDSA and RS256)")
        }
        let malformed = WebAuthnRefusal("the credential's public key is malformed")
        self.algorithm = algorithm
        do {
            switch (algorithm, map[1]?.int) {
            case (.es256, 2):
                guard map[-1]?.int == 1, let x = map[-2]?.byteString, let y = map[-3]?.byteString, x.count == 32, y.count == 32 else { throw malformed }
                key = .p256(try P256.Signing.PublicKey(rawRepresentation: x + y))
            case (.edDSA, 1):
                guard map[-1]?.int == 6, let x = map[-2]?.byteString, x.count == 32 else { throw malformed }
                key = .ed25519(try Curve25519.Signing.PublicKey(rawRepresentation: x))
            case (.rs256, 3):
                guard let n = map[-1]?.byteString, let e = map[-2]?.byteString else { throw malformed }
                key = .rsa(try _RSA.Signing.PublicKey(n: n, e: e))
            default:
                throw WebAuthnRefusal("the credential's key type does not match its algorithm")
            }
        } catch let refusal as WebAuthnRefusal {
            throw refusal
        } catch {
            throw malformed
        }
    }

    /// Whether `signature` (DER for ECDSA, as WebAuthn sends it) signs `data`.
    func verifies(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        switch key {
        case .p256(let key):
            guard let signature = try? P256.Signing.ECDSASignature(derRepresentation: signature) else { return false }
            return key.isValidSignature(signature, for: data)
        case .ed25519(let key):
            return key.isValidSignature(signature, for: data)
        case .rsa(let key):
            return key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
        }
    }
}
