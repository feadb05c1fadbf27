import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// What Keycloak hands out at its token endpoint.
struct KeycloakTokenSet: Sendable, Decodable {
    let accessToken: String
    let expiresIn: Int
    let refreshToken: String?
    let idToken: String?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token", expiresIn = "expires_in", refreshToken = "refresh_token", idToken = "id_token"
    }

    /// The claims of the ID token (else the access token). The token endpoint answered us directly over the
    /// connection we opened, so these are read, not verified (OpenID Connect Core §3.1.3.7, item 6).
    var claims: [String: Any] {
        UnverifiedJWT.payload(idToken ?? accessToken) ?? [:]
    }
}

enum KeycloakError: Error, CustomStringConvertible {
    /// Not reachable, or it answered with something that is not OAuth: a 503 for our callers.
    case unavailable(String)
    /// A wrong password, or a refresh token Keycloak no longer honours.
    case invalidGrant(String)
    /// Any other OAuth error (`invalid_client`, `unauthorized_client`, …): our configuration is wrong.
    case refused(status: Int, error: String, description: String)

    var description: String {
        switch self {
        case .unavailable(let reason): "Keycloak cannot be reached: \(reason)"
        case .invalidGrant(let reason): "Keycloak refused the grant: \(reason)"
        case .refused(let status, let error, let description): "Keycloak answered \(status) \(error): \(description)"
        }
    }
}

extension KeycloakError {
    /// What our caller hears (ErrorMiddleware answers every KeycloakError with it): Keycloak away is a 503 (try
    /// again), Keycloak refusing our client a 502 (fix the config).
    var appError: AppError {
        switch self {
        case .unavailable, .invalidGrant:
            AppError(.serviceUnavailable, title: "Sign-in unavailable", message: "\(self). Try again in a moment.")
        case .refused:
            AppError(.badGateway, title: "Sign-in misconfigured", message: "\(self)")
        }
    }
}

/// Foyer as an OpenID Connect client of one Keycloak realm: discovery (kept once fetched), the password and
/// refresh grants, back-channel logout. Client credentials go as HTTP Basic, or as `client_id` alone for a
/// public client.
final class KeycloakClient: Sendable {
    struct Endpoints: Sendable, Decodable {
        let issuer: String
        let authorizationEndpoint: String
        let tokenEndpoint: String
        let jwksURI: String
        let userinfoEndpoint: String?
        let endSessionEndpoint: String?

        enum CodingKeys: String, CodingKey {
            case issuer, authorizationEndpoint = "authorization_endpoint", tokenEndpoint = "token_endpoint"
            case jwksURI = "jwks_uri", userinfoEndpoint = "userinfo_endpoint", endSessionEndpoint = "end_session_endpoint"
        }
    }

    static let timeout: TimeAmount = .seconds(10)

    let settings: KeycloakSettings
    let http: HTTPClient
    let metrics: FoyerMetrics
    private let discovered = NIOLockedValueBox<Endpoints?>(nil)

    /// Redirects are not followed: a token endpoint that redirects is misconfigured, and we should say so.
    static func makeHTTPClient() -> HTTPClient {
        HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: .init(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5)))
        )
    }

    init(settings: KeycloakSettings, http: HTTPClient, metrics: FoyerMetrics) {
        self.settings = settings
        self.http = http
        self.metrics = metrics
    }

    /// The realm's endpoints; fetched on first use and kept. While Keycloak is unreachable every caller hears so.
    func endpoints() async throws -> Endpoints {
        if let endpoints = discovered.withLockedValue({ $0 }) { return endpoints }
        let (status, body) = try await send(HTTPClientRequest(url: settings.discoveryURL), call: .discovery)
        guard status == 200, let endpoints = try? JSONDecoder().decode(Endpoints.self, from: body) else {
            throw KeycloakError.unavailable("discovery at \(settings.discoveryURL) answered \(status), not an OpenID configuration")
        }
        discovered.withLockedValue { $0 = endpoints }
        return endpoints
    }

    func passwordGrant(username: String, password: String) async throws -> KeycloakTokenSet {
        try await tokenRequest(["grant_type": "password", "username": username, "password": password, "scope": "openid email profile"], call: .token)
    }

    /// The browser flow's second half: the code Keycloak sent to our callback, and the PKCE verifier behind it.
    func authorizationCodeGrant(code: String, codeVerifier: String, redirectURI: String) async throws -> KeycloakTokenSet {
        try await tokenRequest(
            ["grant_type": "authorization_code", "code": code, "code_verifier": codeVerifier, "redirect_uri": redirectURI], call: .token
        )
    }

    /// A token for Foyer itself (the upstream task feed), not for any user: the client must be confidential.
    func clientCredentialsGrant() async throws -> KeycloakTokenSet {
        try await tokenRequest(["grant_type": "client_credentials"], call: .clientCredentials)
    }

    func refresh(_ refreshToken: String) async throws -> KeycloakTokenSet {
        try await tokenRequest(["grant_type": "refresh_token", "refresh_token": refreshToken], call: .refresh)
    }

    /// The userinfo claims for an access token (Keycloak's tokens may leave the email out; userinfo has it).
    func userinfo(accessToken: String) async throws -> [String: Any] {
        let endpoints = try await endpoints()
        guard let url = endpoints.userinfoEndpoint else { return [:] }
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(accessToken)")
        let (status, body) = try await send(request, call: .userinfo)
        guard status == 200, let claims = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw KeycloakError.unavailable("userinfo answered \(status)")
        }
        return claims
    }

    /// The realm's signing keys, as published at `jwks_uri`.
    func jwks() async throws -> Data {
        let endpoints = try await endpoints()
        let (status, body) = try await send(HTTPClientRequest(url: endpoints.jwksURI), call: .jwks)
        guard status == 200 else { throw KeycloakError.unavailable("its JWKS answered \(status)") }
        return body
    }

    /// Ends the user's Keycloak session behind a refresh token: `POST …/logout`, 204.
    func logout(refreshToken: String) async throws {
        let endpoints = try await endpoints()
        let logoutURL = endpoints.endSessionEndpoint ?? settings.realmURL + "/protocol/openid-connect/logout"
        let (status, body) = try await send(formRequest(logoutURL, ["refresh_token": refreshToken]), call: .logout)
        guard (200..<300).contains(status) else { throw Self.oauthError(status: status, body: body) }
    }

    private func tokenRequest(_ fields: [String: String], call: FoyerMetrics.KeycloakCall) async throws -> KeycloakTokenSet {
        let endpoints = try await endpoints()
        let (status, body) = try await send(formRequest(endpoints.tokenEndpoint, fields), call: call)
        guard status == 200 else { throw Self.oauthError(status: status, body: body) }
        do {
            return try JSONDecoder().decode(KeycloakTokenSet.self, from: body)
        } catch {
            throw KeycloakError.unavailable("the token endpoint answered 200 without tokens")
        }
    }

    private func formRequest(_ url: String, _ fields: [String: String]) -> HTTPClientRequest {
        var fields = fields
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        if let secret = settings.clientSecret {
            let credentials = Data("\(FormEncoding.escape(settings.clientID)):\(FormEncoding.escape(secret))".utf8).base64EncodedString()
            request.headers.add(name: "Authorization", value: "Basic \(credentials)")
        } else {
            fields["client_id"] = settings.clientID
        }
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(fields)))
        return request
    }

    private func send(_ request: HTTPClientRequest, call: FoyerMetrics.KeycloakCall) async throws -> (status: Int, body: Data) {
        var request = request
        request.headers.add(name: "Accept", value: "application/json")
        if let trace = RequestTrace.current { request.headers.add(contentsOf: trace.headerPairs) }
        let start = ContinuousClock.now
        do {
            let response = try await http.execute(request, timeout: Self.timeout)
            let body = try await response.body.collect(upTo: 1 << 20)
            metrics.keycloakCall(call, duration: ContinuousClock.now - start, failed: response.status.code >= 500)
            return (Int(response.status.code), Data(buffer: body))
        } catch {
            metrics.keycloakCall(call, duration: ContinuousClock.now - start, failed: true)
            throw KeycloakError.unavailable(String(describing: error))
        }
    }

    /// Keycloak's `{"error", "error_description"}`; `invalid_grant` is a 400 or (wrong password) a 401.
    private static func oauthError(status: Int, body: Data) -> KeycloakError {
        struct OAuthError: Decodable {
            let error: String
            let error_description: String?
        }
        guard let parsed = try? JSONDecoder().decode(OAuthError.self, from: body) else {
            return .unavailable("it answered \(status) without an OAuth error")
        }
        let description = parsed.error_description ?? parsed.error
        if parsed.error == "invalid_grant" { return .invalidGrant(description) }
        return .refused(status: status, error: parsed.error, description: description)
    }
}

/// `application/x-www-form-urlencoded`, as OAuth token endpoints read it.
enum FormEncoding {
    private static let unreserved: CharacterSet = {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return allowed
    }()

    static func escape(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
    }

    static func encode(_ fields: [String: String]) -> String {
        fields.sorted { $0.key < $1.key }.map { "\(escape($0.key))=\(escape($0.value))" }.joined(separator: "&")
    }
}

/// The payload of a compact JWS, unverified.
enum UnverifiedJWT {
    /// Three base64url parts: what Keycloak hands out. Foyer's own tokens have no dots.
    static func isJWT(_ token: String) -> Bool {
        token.utf8.count <= 16384 && token.split(separator: ".", omittingEmptySubsequences: false).count == 3
    }

    static func payload(_ token: String) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = Data(base64URLEncoded: parts[1]) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }
}
