import Crypto
import Foundation
import HTTPTypes

/// A DPoP proof (RFC 9449) that checked out: signed by the key it carries, for this request, fresh, never seen before.
struct DPoPProof: Sendable, Equatable {
    /// RFC 7638 thumbprint of the proof's public key: what a bound session remembers.
    let thumbprint: String
    let jti: String
    let issuedAt: Date
}

/// Why a proof or a bound token was refused, said to the app in `WWW-Authenticate: DPoP error=…` and the body.
struct DPoPRefusal: Error, CustomStringConvertible {
    enum Code: String {
        case invalidProof = "invalid_dpop_proof"
        case invalidToken = "invalid_token"
    }

    let code: Code
    let description: String

    static func proof(_ description: String) -> DPoPRefusal { DPoPRefusal(code: .invalidProof, description: description) }
    static func token(_ description: String) -> DPoPRefusal { DPoPRefusal(code: .invalidToken, description: description) }

    /// RFC 9449 §7.1: the scheme, the error and the algorithms a proof may be signed with.
    var challenge: String {
        "DPoP error=\"\(code.rawValue)\", error_description=\"\(ErrorMiddleware.quotable(description))\", algs=\"\(DPoPVerifier.algorithmList)\""
    }
}

extension HTTPField.Name {
    static let dpop = HTTPField.Name("DPoP")!
}

/// Checks the `DPoP` header of a request against RFC 9449 §4.3, and spends its `jti` in the store so that no
/// instance accepts it twice.
struct DPoPVerifier: Sendable {
    /// Asymmetric only (§4.2): `none` and HMAC prove nothing about a key the app holds. ES256 is what the Secure
    /// Enclave and Android's Keystore sign with.
    static let algorithms: [String] = ["ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "RS256", "RS384", "RS512", "EdDSA"]
    static let algorithmList = algorithms.joined(separator: " ")
    /// How far a proof's `iat` may be from our clock, either way: a proof is made for one request, at once.
    static let window: TimeInterval = 60
    /// A proof is a few hundred bytes; a header of kilobytes is not one.
    static let maximumLength = 8 * 1024

    let spent: SpentCredentials
    let keys = ProofKeys()

    /// The proof of `headers` for a request of `method` to `url` (scheme, host and path as the app addressed it),
    /// presenting `accessToken` (nil at sign-in, where there is none yet). nil when the request carries no proof.
    func proof(in headers: HTTPFields, method: HTTPRequest.Method, url: String, accessToken: String?, now: Date = Date()) async throws -> DPoPProof? {
        let values = headers[values: .dpop]
        guard !values.isEmpty else { return nil }
        guard values.count == 1 else { throw DPoPRefusal.proof("The request carries \(values.count) DPoP headers; send exactly one proof") }
        let proof = try check(values[0], method: method.rawValue, url: url, accessToken: accessToken, now: now)
        // Kept until it could no longer pass the iat check anyway.
        let expiresAt = proof.issuedAt.addingTimeInterval(Self.window + 1)
        guard try await spent.spend(.dpopProof, scope: proof.thumbprint, identifier: proof.jti, issuedAt: proof.issuedAt, expiresAt: expiresAt, now: now) else {
            throw DPoPRefusal.proof("The proof's jti was used before (or the proof was made before this server restarted): make a new proof for every request")
        }
        return proof
    }

    /// Every check but the replay one: what the proof says and whether its own key signed it.
    func check(_ proof: String, method: String, url: String, accessToken: String?, now: Date) throws -> DPoPProof {
        guard proof.utf8.count <= Self.maximumLength else { throw DPoPRefusal.proof("The DPoP proof is longer than \(Self.maximumLength) bytes") }
        let parts = proof.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw DPoPRefusal.proof("The DPoP header is not a JWT") }
        let key = try keys.key(forHeader: parts[0])
        let signingInput = Data(proof.utf8[proof.utf8.startIndex..<parts[1].utf8.endIndex])
        guard let signature = Data(base64URLEncoded: parts[2]), key.signs(signingInput, with: signature) else {
            throw DPoPRefusal.proof("The proof's signature does not verify with the key it carries")
        }
        guard let payload = Data(base64URLEncoded: parts[1]), let claims = try? JSONDecoder().decode(Claims.self, from: payload) else {
            throw DPoPRefusal.proof("The proof's claims are not a JSON object of jti, htm, htu and iat (a number)")
        }
        guard let jti = claims.jti, !jti.isEmpty, jti.utf8.count <= 256 else { throw DPoPRefusal.proof("The proof has no jti (or one over 256 bytes)") }
        guard claims.htm == method else {
            throw DPoPRefusal.proof("The proof is for \(claims.htm ?? "no method") (htm), not for this \(method)")
        }
        // Apps name the URL as they addressed it, so it is usually the very string: no parsing then.
        guard let htu = claims.htu, htu == url || Self.sameTarget(htu, url) else {
            throw DPoPRefusal.proof("The proof is for \(claims.htu ?? "no URL") (htu), not for \(url)")
        }
        guard let iat = claims.iat else { throw DPoPRefusal.proof("The proof has no iat") }
        let age = now.timeIntervalSince1970 - iat
        guard abs(age) <= Self.window else {
            throw DPoPRefusal.proof("The proof was made \(Int(age.rounded())) s \(age > 0 ? "ago" : "from now") (iat); a proof is good for \(Int(Self.window)) s either way")
        }
        if let accessToken {
            guard let ath = claims.ath else { throw DPoPRefusal.proof("The proof has no ath: it must carry the hash of the token it goes with") }
            guard ath == Data(SHA256.hash(data: Data(accessToken.utf8))).base64URLEncoded else {
                throw DPoPRefusal.proof("The proof's ath is the hash of another token")
            }
        }
        return DPoPProof(thumbprint: key.thumbprint, jti: jti, issuedAt: Date(timeIntervalSince1970: iat))
    }

    /// §4.3: `htu` names this request's URL, compared without query and fragment, scheme and host in any case, a
    /// default port written or not. A websocket's proof may name it `ws(s)://`: it is the upgrade request's URL.
    static func sameTarget(_ htu: String, _ url: String) -> Bool {
        guard let claimed = Target(htu), let actual = Target(url) else { return false }
        return claimed == actual
    }

    private struct Target: Equatable {
        let scheme: String
        let host: String
        let port: Int
        let path: String

        init?(_ text: String) {
            guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(), let host = components.host?.lowercased() else {
                return nil
            }
            let secure: Bool
            switch scheme {
            case "https", "wss": secure = true
            case "http", "ws": secure = false
            default: return nil
            }
            self.scheme = secure ? "https" : "http"
            self.host = host
            port = components.port ?? (secure ? 443 : 80)
            path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        }
    }

    private struct Claims: Decodable {
        let jti: String?
        let htm: String?
        let htu: String?
        let iat: Double?
        let ath: String?
    }
}
