import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// What a provider hands out at its token endpoint.
struct ProviderTokenSet: Sendable, Decodable {
    let accessToken: String
    let expiresIn: Int
    let refreshToken: String?
    let idToken: String?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token", expiresIn = "expires_in", refreshToken = "refresh_token", idToken = "id_token"
    }

    init(accessToken: String, expiresIn: Int, refreshToken: String?, idToken: String?) {
        (self.accessToken, self.expiresIn, self.refreshToken, self.idToken) = (accessToken, expiresIn, refreshToken, idToken)
    }

    /// `expires_in` is RECOMMENDED only (RFC 6749 §5.1): without it, an hour, what most providers give.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        accessToken = try container.decode(String.self, forKey: .accessToken)
        expiresIn = try container.decodeIfPresent(Int.self, forKey: .expiresIn) ?? 3600
        refreshToken = try container.decodeIfPresent(String.self, forKey: .refreshToken)
        idToken = try container.decodeIfPresent(String.self, forKey: .idToken)
    }

    /// The claims of the ID token (else the access token). The token endpoint answered us directly over the
    /// connection we opened, so these are read, not verified (OpenID Connect Core §3.1.3.7, item 6).
    var claims: [String: Any] {
        UnverifiedJWT.payload(idToken ?? accessToken) ?? [:]
    }
}

/// A provider call that did not give what we asked for; `provider` is its display name ("Keycloak").
struct ProviderError: Error, CustomStringConvertible {
    enum Kind: Equatable {
        /// Not reachable, or it answered with something that is not OAuth: a 503 for our callers.
        case unavailable
        /// A wrong password, or a refresh token the provider no longer honours.
        case invalidGrant
        /// Any other OAuth error (`invalid_client`, `unauthorized_client`, …): our configuration is wrong.
        case refused(status: Int, error: String)
    }

    let kind: Kind
    let provider: String
    let reason: String

    var description: String {
        switch kind {
        case .unavailable: "\(provider) cannot be reached: \(reason)"
        case .invalidGrant: "\(provider) refused the grant: \(reason)"
        case .refused(let status, let error): "\(provider) answered \(status) \(error): \(reason)"
        }
    }

    /// What our caller hears (ErrorMiddleware answers every ProviderError with it): the provider away is a 503
    /// (try again), the provider refusing our client a 502 (fix the config).
    var appError: AppError {
        switch kind {
        case .unavailable, .invalidGrant:
            AppError(.serviceUnavailable, title: Phrase("providers.errors.unavailable.title"), message: Phrase("providers.errors.unavailable", ["why": "\(self)"]))
        case .refused:
            AppError(.badGateway, title: "Sign-in misconfigured", message: "\(self)")
        }
    }
}

/// Foyer as an OpenID Connect client of one provider: discovery (kept once fetched), the code, password, refresh
/// and client-credentials grants, userinfo, introspection, logout. Client credentials go as HTTP Basic, or as
/// `client_id` alone for a public client.
final class ProviderClient: Sendable {
    struct Endpoints: Sendable, Decodable {
        let issuer: String
        let authorizationEndpoint: String
        let tokenEndpoint: String
        let jwksURI: String
        let userinfoEndpoint: String?
        let endSessionEndpoint: String?
        let revocationEndpoint: String?
        let introspectionEndpoint: String?
        /// Absent means `authorization_code` and `implicit` only (Discovery §3).
        let grantTypesSupported: [String]?

        enum CodingKeys: String, CodingKey {
            case issuer, authorizationEndpoint = "authorization_endpoint", tokenEndpoint = "token_endpoint"
            case jwksURI = "jwks_uri", userinfoEndpoint = "userinfo_endpoint", endSessionEndpoint = "end_session_endpoint"
            case revocationEndpoint = "revocation_endpoint", introspectionEndpoint = "introspection_endpoint"
            case grantTypesSupported = "grant_types_supported"
        }

        var allowsPasswordGrant: Bool { grantTypesSupported?.contains("password") ?? false }
    }

    static let timeout: TimeAmount = .seconds(10)

    let settings: ProviderSettings
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

    init(settings: ProviderSettings, http: HTTPClient, metrics: FoyerMetrics) {
        self.settings = settings
        self.http = http
        self.metrics = metrics
    }

    func failure(_ reason: String, kind: ProviderError.Kind = .unavailable) -> ProviderError {
        ProviderError(kind: kind, provider: settings.displayName, reason: reason)
    }

    /// The provider's endpoints; fetched on first use and kept. While it is unreachable every caller hears so.
    /// Its issuer must be the one configured, exactly (Discovery §4.3), or nothing it says is used.
    func endpoints() async throws -> Endpoints {
        if let endpoints = discovered.withLockedValue({ $0 }) { return endpoints }
        let (status, body) = try await send(HTTPClientRequest(url: settings.discoveryURL), call: .discovery)
        guard status == 200, let endpoints = try? JSONDecoder().decode(Endpoints.self, from: body) else {
            throw failure("discovery at \(settings.discoveryURL) answered \(status), not an OpenID configuration")
        }
        if let expected = settings.expectedIssuer, endpoints.issuer != expected {
            throw failure("its discovery document names the issuer \(endpoints.issuer), not \(expected) as configured", kind: .refused(status: status, error: "issuer_mismatch"))
        }
        discovered.withLockedValue { $0 = endpoints }
        return endpoints
    }

    func passwordGrant(username: String, password: String) async throws -> ProviderTokenSet {
        try await tokenRequest(["grant_type": "password", "username": username, "password": password, "scope": settings.scopes], call: .token)
    }

    /// The browser flow's second half: the code the provider sent to our callback, and the PKCE verifier behind it.
    func authorizationCodeGrant(code: String, codeVerifier: String, redirectURI: String) async throws -> ProviderTokenSet {
        try await tokenRequest(
            ["grant_type": "authorization_code", "code": code, "code_verifier": codeVerifier, "redirect_uri": redirectURI], call: .token
        )
    }

    /// A token for Foyer itself (the upstream task feed), not for any user: the client must be confidential.
    func clientCredentialsGrant() async throws -> ProviderTokenSet {
        try await tokenRequest(["grant_type": "client_credentials"], call: .clientCredentials)
    }

    func refresh(_ refreshToken: String) async throws -> ProviderTokenSet {
        try await tokenRequest(["grant_type": "refresh_token", "refresh_token": refreshToken], call: .refresh)
    }

    /// The userinfo claims for an access token (tokens may leave the email out; userinfo has it).
    func userinfo(accessToken: String) async throws -> [String: Any] {
        let endpoints = try await endpoints()
        guard let url = endpoints.userinfoEndpoint else { return [:] }
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(accessToken)")
        let (status, body) = try await send(request, call: .userinfo)
        guard status == 200, let claims = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw failure("userinfo answered \(status)")
        }
        return claims
    }

    /// RFC 7662: what the provider says of an access token that is not a JWT. Nil when it advertises no
    /// introspection endpoint; `["active": false]` for a token it does not know.
    func introspect(_ token: String) async throws -> [String: Any]? {
        guard let url = try await endpoints().introspectionEndpoint else { return nil }
        let (status, body) = try await send(formRequest(url, ["token": token, "token_type_hint": "access_token"]), call: .introspection)
        // Some providers answer an unknown token with an error status instead of `active: false`.
        if (400..<500).contains(status) { return ["active": false] }
        guard status == 200, let answer = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw failure("introspection answered \(status)")
        }
        return answer
    }

    /// The provider's signing keys, as published at `jwks_uri`.
    func jwks() async throws -> Data {
        let endpoints = try await endpoints()
        let (status, body) = try await send(HTTPClientRequest(url: endpoints.jwksURI), call: .jwks)
        guard status == 200 else { throw failure("its JWKS answered \(status)") }
        return body
    }

    /// Ends the provider's session behind a refresh token: Keycloak's `POST …/logout` (204), elsewhere the refresh
    /// token's revocation (RFC 7009) where a revocation endpoint is advertised.
    func logout(refreshToken: String) async throws {
        let endpoints = try await endpoints()
        let request: HTTPClientRequest
        if settings.endsSessionsByLogoutPost, let logoutURL = endpoints.endSessionEndpoint {
            request = formRequest(logoutURL, ["refresh_token": refreshToken])
        } else if let revocation = endpoints.revocationEndpoint {
            request = formRequest(revocation, ["token": refreshToken, "token_type_hint": "refresh_token"])
        } else {
            return
        }
        let (status, body) = try await send(request, call: .logout)
        guard (200..<300).contains(status) else { throw oauthError(status: status, body: body) }
    }

    private func tokenRequest(_ fields: [String: String], call: FoyerMetrics.ProviderCall) async throws -> ProviderTokenSet {
        let endpoints = try await endpoints()
        let (status, body) = try await send(formRequest(endpoints.tokenEndpoint, fields), call: call)
        guard status == 200 else { throw oauthError(status: status, body: body) }
        do {
            return try JSONDecoder().decode(ProviderTokenSet.self, from: body)
        } catch {
            throw failure("the token endpoint answered 200 without tokens")
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

    private func send(_ request: HTTPClientRequest, call: FoyerMetrics.ProviderCall) async throws -> (status: Int, body: Data) {
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
            throw failure(String(describing: error))
        }
    }

    /// `{"error", "error_description"}`; `invalid_grant` is a 400 or (wrong password, at Keycloak) a 401.
    private func oauthError(status: Int, body: Data) -> ProviderError {
        struct OAuthError: Decodable {
            let error: String
            let error_description: String?
        }
        guard let parsed = try? JSONDecoder().decode(OAuthError.self, from: body) else {
            return failure("it answered \(status) without an OAuth error")
        }
        let description = parsed.error_description ?? parsed.error
        if parsed.error == "invalid_grant" { return failure(description, kind: .invalidGrant) }
        return failure(description, kind: .refused(status: status, error: parsed.error))
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
    /// Three base64url parts: what providers hand out as JWTs. Foyer's own tokens have no dots.
    static func isJWT(_ token: String) -> Bool {
        token.utf8.count <= 16384 && token.split(separator: ".", omittingEmptySubsequences: false).count == 3
    }

    static func payload(_ token: String) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = Data(base64URLEncoded: parts[1]) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }
}
