import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOSSL

/// One conversation with an ACME server (RFC 8555): every request after the directory is a JWS signed with the
/// account's P-256 key (ES256), carrying a nonce the server gave. A `badNonce` (which a server may answer to any
/// request, and Pebble does to 5% on purpose) is sent again with the fresh nonce that came with it.
struct ACMEClient {
    struct Problem: Error, CustomStringConvertible {
        let status: Int
        let type: String
        let detail: String
        var description: String { "\(detail) (\(type), HTTP \(status))" }
    }

    struct Reply {
        let status: Int
        let headers: HTTPHeaders
        let body: Data

        var location: String? { headers.first(name: "Location") }
        func json() throws -> [String: Any] {
            guard let object = try JSONSerialization.jsonObject(with: body) as? [String: Any] else {
                throw Problem(status: status, type: "foyer:notJSON", detail: "the ACME server answered something other than a JSON object")
            }
            return object
        }
    }

    private struct Directory {
        let newNonce: String
        let newAccount: String
        let newOrder: String
    }

    let http: HTTPClient
    let directoryURL: String
    let accountKey: P256.Signing.PrivateKey
    private var directory: Directory?
    private var nonce: String?
    /// The account's URL, once known: requests after the account's are signed with it instead of the public key.
    private(set) var accountURL: String?

    init(http: HTTPClient, directoryURL: String, accountKey: P256.Signing.PrivateKey, accountURL: String?) {
        self.http = http
        self.directoryURL = directoryURL
        self.accountKey = accountKey
        self.accountURL = accountURL
    }

    /// The account for this key: made (or found: the server answers 200 for a key it knows) with the contact given.
    mutating func account(email: String?) async throws -> String {
        var payload: [String: Any] = ["termsOfServiceAgreed": true]
        if let email { payload["contact"] = ["mailto:" + email] }
        let reply = try await post(try await urls().newAccount, payload: payload, signedWithKey: true)
        guard let url = reply.location else { throw Problem(status: reply.status, type: "foyer:noLocation", detail: "the new account has no URL") }
        accountURL = url
        return url
    }

    /// A new order for `domains`: its URL and what it says (`authorizations`, `finalize`, `status`).
    mutating func order(_ domains: [String]) async throws -> (url: String, order: [String: Any]) {
        let reply = try await post(try await urls().newOrder, payload: ["identifiers": domains.map { ["type": "dns", "value": $0] }])
        guard let url = reply.location else { throw Problem(status: reply.status, type: "foyer:noLocation", detail: "the new order has no URL") }
        return (url, try reply.json())
    }

    /// POST-as-GET: what the object at `url` says now.
    mutating func fetch(_ url: String) async throws -> Reply {
        try await post(url, payload: nil)
    }

    /// `key authorization` of a challenge token: what the HTTP-01 answer must be (RFC 8555 §8.1).
    func keyAuthorization(_ token: String) -> String {
        token + "." + Self.thumbprint(of: accountKey.publicKey)
    }

    /// Signs `payload` (nil: POST-as-GET, an empty payload) and posts it, with the account's URL or its public key.
    @discardableResult
    mutating func post(_ url: String, payload: [String: Any]?, signedWithKey: Bool = false) async throws -> Reply {
        var attempts = 0
        while true {
            attempts += 1
            let nonce = try await takeNonce()
            var protected: [String: Any] = ["alg": "ES256", "nonce": nonce, "url": url]
            if signedWithKey || accountURL == nil { protected["jwk"] = Self.jwk(of: accountKey.publicKey) } else { protected["kid"] = accountURL }
            let protectedPart = try JSONSerialization.data(withJSONObject: protected, options: [.sortedKeys]).base64URLEncoded
            let payloadPart = try payload.map { try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]).base64URLEncoded } ?? ""
            let signature = try accountKey.signature(for: Data((protectedPart + "." + payloadPart).utf8)).rawRepresentation.base64URLEncoded
            let body = try JSONSerialization.data(withJSONObject: ["protected": protectedPart, "payload": payloadPart, "signature": signature])
            let reply = try await send(url, method: .POST, body: body)
            if (200..<300).contains(reply.status) { return reply }
            let problem = Self.problem(in: reply)
            if problem.type == "urn:ietf:params:acme:error:badNonce", attempts < 5 { continue }
            throw problem
        }
    }

    private mutating func urls() async throws -> Directory {
        if let directory { return directory }
        let reply = try await send(directoryURL, method: .GET, body: nil)
        guard reply.status == 200, let object = try? reply.json(), let newNonce = object["newNonce"] as? String,
            let newAccount = object["newAccount"] as? String, let newOrder = object["newOrder"] as? String
        else { throw Problem(status: reply.status, type: "foyer:directory", detail: "\(directoryURL) is not an ACME directory") }
        let found = Directory(newNonce: newNonce, newAccount: newAccount, newOrder: newOrder)
        directory = found
        return found
    }

    private mutating func takeNonce() async throws -> String {
        if let nonce {
            self.nonce = nil
            return nonce
        }
        let reply = try await send(try await urls().newNonce, method: .HEAD, body: nil)
        guard let fresh = reply.headers.first(name: "Replay-Nonce") else {
            throw Problem(status: reply.status, type: "foyer:noNonce", detail: "the ACME server gave no nonce")
        }
        return fresh
    }

    /// One HTTP exchange; the nonce that comes with any answer is kept for the next request.
    private mutating func send(_ url: String, method: HTTPMethod, body: Data?) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "User-Agent", value: "Foyer")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/jose+json")
            request.body = .bytes(ByteBuffer(data: body))
        }
        let response = try await http.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        if let fresh = response.headers.first(name: "Replay-Nonce") { nonce = fresh }
        return Reply(status: Int(response.status.code), headers: response.headers, body: Data(buffer: bytes))
    }

    private static func problem(in reply: Reply) -> Problem {
        let object = try? reply.json()
        return Problem(
            status: reply.status, type: object?["type"] as? String ?? "about:blank",
            detail: object?["detail"] as? String ?? String(decoding: reply.body.prefix(300), as: UTF8.self)
        )
    }

    /// The public key as a JWK (RFC 7518 §6.2), its members in the order RFC 7638's thumbprint needs.
    static func jwk(of key: P256.Signing.PublicKey) -> [String: String] {
        let point = key.x963Representation  // 0x04, then x and y
        return ["crv": "P-256", "kty": "EC", "x": Data(point[1...32]).base64URLEncoded, "y": Data(point[33...64]).base64URLEncoded]
    }

    /// RFC 7638: SHA-256 of the JWK's required members, in lexicographic order, no white space.
    static func thumbprint(of key: P256.Signing.PublicKey) -> String {
        let jwk = jwk(of: key)
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(jwk["x"]!)","y":"\#(jwk["y"]!)"}"#
        return Data(SHA256.hash(data: Data(canonical.utf8))).base64URLEncoded
    }
}
