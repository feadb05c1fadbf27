import Crypto
import CryptoExtras
import Foundation
import NIOConcurrencyHelpers

/// The public key a proof's header carries, parsed and checked once: an app signs every proof with one key, so the
/// header (the proof's first segment) repeats byte for byte, and what it says is kept by that segment.
struct ProofKey: Sendable {
    let algorithm: String
    /// RFC 7638 thumbprint: what a bound session remembers.
    let thumbprint: String
    private let key: Key

    private enum Key: @unchecked Sendable {
        case p256(P256.Signing.PublicKey)
        case p384(P384.Signing.PublicKey)
        case p521(P521.Signing.PublicKey)
        case ed25519(Curve25519.Signing.PublicKey)
        case rsa(_RSA.Signing.PublicKey, _RSA.Signing.Padding, bits: Int)
    }

    /// The key a proof's header (base64url JSON) names; DPoPRefusal says what is wrong with it.
    init(header segment: Substring) throws {
        guard let data = Data(base64URLEncoded: segment), let header = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw DPoPRefusal.proof("The DPoP header is not a JWT")
        }
        guard (header["typ"] as? String)?.lowercased() == "dpop+jwt" else {
            throw DPoPRefusal.proof("The proof's typ is \(header["typ"] as? String ?? "missing"), not dpop+jwt")
        }
        let algorithm = header["alg"] as? String ?? "none"
        guard DPoPVerifier.algorithms.contains(algorithm) else {
            throw DPoPRefusal.proof("The proof is signed with \(algorithm); sign it with the app's private key (\(DPoPVerifier.algorithmList))")
        }
        guard let jwk = header["jwk"] as? [String: Any] else { throw DPoPRefusal.proof("The proof's header carries no public key (jwk)") }
        guard jwk["d"] == nil else { throw DPoPRefusal.proof("The proof's jwk holds a private key: send only the public one") }
        guard let thumbprint = Self.thumbprint(of: jwk) else {
            throw DPoPRefusal.proof("The proof's jwk is not an EC, RSA or OKP public key with its required members")
        }
        self.algorithm = algorithm
        self.thumbprint = thumbprint
        key = try Self.key(jwk, for: algorithm)
    }

    /// Whether `signature` (JWS form: r‖s for ECDSA) signs `input` with this key and algorithm.
    func signs(_ input: some DataProtocol, with signature: Data) -> Bool {
        switch key {
        case .p256(let key):
            guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(signature, for: input)
        case .p384(let key):
            guard let signature = try? P384.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(signature, for: input)
        case .p521(let key):
            guard let signature = try? P521.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(signature, for: input)
        case .ed25519(let key):
            return key.isValidSignature(signature, for: input)
        case .rsa(let key, let padding, let bits):
            let signature = _RSA.Signing.RSASignature(rawRepresentation: signature)
            switch bits {
            case 384: return key.isValidSignature(signature, for: SHA384.hash(data: input), padding: padding)
            case 512: return key.isValidSignature(signature, for: SHA512.hash(data: input), padding: padding)
            default: return key.isValidSignature(signature, for: SHA256.hash(data: input), padding: padding)
            }
        }
    }

    /// The key of the JWK's type and curve that `algorithm` signs with; DPoPRefusal when they do not go together.
    private static func key(_ jwk: [String: Any], for algorithm: String) throws -> Key {
        let type = jwk["kty"] as? String ?? ""
        let curve = jwk["crv"] as? String
        let member = { (name: String) -> Data? in (jwk[name] as? String).flatMap { Data(base64URLEncoded: $0) } }
        let mismatch = DPoPRefusal.proof("The proof's jwk (\(type)\(curve.map { " " + $0 } ?? "")) cannot sign \(algorithm)")
        let malformed = DPoPRefusal.proof("The proof's jwk is not a valid \(type)\(curve.map { " " + $0 } ?? "") public key")
        do {
            switch (algorithm, type, curve) {
            case ("ES256", "EC", "P-256"):
                guard let x = member("x"), let y = member("y") else { throw malformed }
                return .p256(try P256.Signing.PublicKey(rawRepresentation: x + y))
            case ("ES384", "EC", "P-384"):
                guard let x = member("x"), let y = member("y") else { throw malformed }
                return .p384(try P384.Signing.PublicKey(rawRepresentation: x + y))
            case ("ES512", "EC", "P-521"):
                guard let x = member("x"), let y = member("y") else { throw malformed }
                return .p521(try P521.Signing.PublicKey(rawRepresentation: x + y))
            case ("EdDSA", "OKP", "Ed25519"):
                guard let x = member("x") else { throw malformed }
                return .ed25519(try Curve25519.Signing.PublicKey(rawRepresentation: x))
            case (_, "RSA", _) where algorithm.hasPrefix("RS") || algorithm.hasPrefix("PS"):
                guard let n = member("n"), let e = member("e") else { throw malformed }
                let padding: _RSA.Signing.Padding = algorithm.hasPrefix("PS") ? .PSS : .insecurePKCS1v1_5
                return .rsa(try _RSA.Signing.PublicKey(n: n, e: e), padding, bits: Int(algorithm.dropFirst(2)) ?? 256)
            default:
                throw mismatch
            }
        } catch let refusal as DPoPRefusal {
            throw refusal
        } catch {
            throw malformed
        }
    }

    /// RFC 7638: SHA-256 of the key's required members, in lexicographic order, as JSON without whitespace.
    static func thumbprint(of jwk: [String: Any]) -> String? {
        let required: [String]
        switch jwk["kty"] as? String {
        case "EC": required = ["crv", "kty", "x", "y"]
        case "RSA": required = ["e", "kty", "n"]
        case "OKP": required = ["crv", "kty", "x"]
        default: return nil
        }
        var members: [String] = []
        for name in required {
            guard let value = jwk[name] as? String, !value.isEmpty,
                let encoded = try? JSONSerialization.data(withJSONObject: value, options: .fragmentsAllowed)
            else { return nil }
            members.append("\"\(name)\":" + String(decoding: encoded, as: UTF8.self))
        }
        let canonical = "{" + members.joined(separator: ",") + "}"
        return Data(SHA256.hash(data: Data(canonical.utf8))).base64URLEncoded
    }
}

/// Keys by the header segment that named them. Bounded: a full cache starts over (each app's next proof parses its
/// header again), so headers made up by the thousand cost parsing, never memory.
final class ProofKeys: Sendable {
    static let capacity = 10_000
    private let keys = NIOLockedValueBox([Substring: ProofKey]())

    func key(forHeader segment: Substring) throws -> ProofKey {
        if let known = keys.withLockedValue({ $0[segment] }) { return known }
        let key = try ProofKey(header: segment)
        keys.withLockedValue { keys in
            if keys.count >= Self.capacity { keys.removeAll(keepingCapacity: true) }
            // A copy: the segment is a slice of the request's header value.
            keys[Substring(String(segment))] = key
        }
        return key
    }
}
