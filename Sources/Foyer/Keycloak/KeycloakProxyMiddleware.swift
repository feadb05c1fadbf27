import AsyncHTTPClient
import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1

/// `/realms/{realm}/…` and `/auth/realms/{realm}/…` forwarded to Keycloak, so an app that can reach only Foyer
/// runs AppAuth against it: discovery, the login page, the token exchange, userinfo, JWKS, logout.
/// Keycloak is told where the request came in (`X-Forwarded-Host/Proto/Port`), so the URLs it advertises and the
/// `iss` of the tokens it mints there name Foyer; Foyer accepts those tokens as Bearer. A middleware, not a route:
/// these requests are Keycloak's business, so Foyer's session and CSRF checks must not see them.
struct KeycloakProxyMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    /// RFC 9110 §7.6.1: meaningful for one connection only.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer",
        "transfer-encoding", "upgrade",
    ]
    /// Set by us from what we know, never passed on from the client.
    static let replaced: Set<String> = ["host", "content-length", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "x-forwarded-for", "forwarded", "x-request-id", "traceparent", "tracestate"]
    static let maximumRequestBody = 1 << 20
    static let maximumResponseBody = 16 << 20
    static let timeout: TimeAmount = .seconds(30)

    let realm: String
    let http: HTTPClient
    let trustProxy: Bool
    /// `scheme://host[:port]` of Keycloak, and the path its realms live under ("" or "/auth").
    let keycloakOrigin: String
    let keycloakPath: String

    init(settings: KeycloakSettings, http: HTTPClient, trustProxy: Bool) throws {
        guard let keycloak = URLComponents(string: settings.baseURL), let scheme = keycloak.scheme, let host = keycloak.host else {
            throw StartupError("Keycloak: the base URL \(settings.baseURL) is not a URL")
        }
        realm = settings.realm
        self.http = http
        self.trustProxy = trustProxy
        keycloakOrigin = "\(scheme)://\(host)" + (keycloak.port.map { ":\($0)" } ?? "")
        keycloakPath = keycloak.path
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let (prefix, realmPath) = route(request.uri.path) else { return try await next(request, context) }
        let publicOrigin = request.publicOrigin(trustProxy: trustProxy)
        var request = request
        var upstream = HTTPClientRequest(url: keycloakOrigin + keycloakPath + realmPath + (request.uri.query.map { "?\($0)" } ?? ""))
        upstream.method = HTTPMethod(rawValue: request.method.rawValue)
        upstream.headers = forwardedHeaders(request, publicOrigin: publicOrigin, context: context)
        if request.method != .get, request.method != .head {
            upstream.body = .bytes(try await request.collectBody(limitedTo: Self.maximumRequestBody))
        }

        let answer: HTTPClientResponse
        let body: ByteBuffer
        do {
            answer = try await http.execute(upstream, timeout: Self.timeout)
            body = try await answer.body.collect(upTo: Self.maximumResponseBody)
        } catch {
            context.logger.warning("Keycloak proxy failed", metadata: ["error": .string("\(error)")])
            throw AppError(.badGateway, title: Phrase("errors.keycloak.title"), message: Phrase("errors.keycloak"))
        }
        let keycloakRealms = keycloakOrigin + keycloakPath + "/realms/"
        let publicRealms = publicOrigin + prefix + "/realms/"
        var headers = HTTPFields()
        for (name, value) in answer.headers where !Self.isHopByHop(name, connection: answer.headers["connection"].joined(separator: ",")) && name.lowercased() != "content-length" {
            guard let fieldName = HTTPField.Name(name) else { continue }
            switch name.lowercased() {
            // A Keycloak that ignores X-Forwarded-* still names itself: send the app back through Foyer.
            case "location": headers.append(HTTPField(name: fieldName, value: Self.replacingPrefix(keycloakRealms, with: publicRealms, in: value)))
            case "set-cookie": headers.append(HTTPField(name: fieldName, value: Self.cookieForFoyer(value, keycloakPath: keycloakPath, prefix: prefix)))
            default: headers.append(HTTPField(name: fieldName, value: value))
            }
        }
        return Response(status: .init(code: Int(answer.status.code), reasonPhrase: answer.status.reasonPhrase), headers: headers, body: .init(byteBuffer: body))
    }

    /// `("/auth" or "", "/realms/{realm}/…")` for a path of the configured realm; nil for anything else.
    private func route(_ path: String) -> (prefix: String, realmPath: String)? {
        let realmRoot = "/realms/\(realm)"
        for prefix in ["", "/auth"] {
            let root = prefix + realmRoot
            if path == root || path.hasPrefix(root + "/") { return (prefix, String(path.dropFirst(prefix.count))) }
        }
        return nil
    }

    private func forwardedHeaders(_ request: Request, publicOrigin: String, context: Context) -> HTTPHeaders {
        var headers = HTTPHeaders()
        let connection = request.headers.value(.connection)
        for field in request.headers {
            let name = field.name.canonicalName
            guard !Self.isHopByHop(name, connection: connection), !Self.replaced.contains(name) else { continue }
            if name == "cookie" {
                // Foyer's own cookies are not Keycloak's to see.
                let kept = field.value.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
                    .filter { !$0.hasPrefix("foyer_") }
                if !kept.isEmpty { headers.add(name: "Cookie", value: kept.joined(separator: "; ")) }
                continue
            }
            headers.add(name: field.name.rawName, value: field.value)
        }
        let origin = URLComponents(string: publicOrigin)
        let https = origin?.scheme == "https"
        headers.add(name: "X-Forwarded-Proto", value: https ? "https" : "http")
        headers.add(name: "X-Forwarded-Host", value: (origin?.host ?? "localhost") + (origin?.port.map { ":\($0)" } ?? ""))
        headers.add(name: "X-Forwarded-Port", value: String(origin?.port ?? (https ? 443 : 80)))
        let earlier = trustProxy ? request.headers.value(.xForwardedFor).map { $0 + ", " } ?? "" : ""
        if let client = context.remoteAddress?.ipAddress { headers.add(name: "X-Forwarded-For", value: earlier + client) }
        // Ours, not the browser's: Keycloak's span is a child of this request's.
        if let trace = RequestTrace.current { headers.add(contentsOf: trace.headerPairs) }
        return headers
    }

    private static func isHopByHop(_ name: String, connection: String?) -> Bool {
        let name = name.lowercased()
        if hopByHop.contains(name) { return true }
        return connection?.lowercased().split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == name } ?? false
    }

    static func replacingPrefix(_ prefix: String, with replacement: String, in value: String) -> String {
        value.hasPrefix(prefix) ? replacement + value.dropFirst(prefix.count) : value
    }

    /// Keycloak's cookies belong to Foyer's host now: no `Domain` of Keycloak's, and a path under the prefix the app
    /// used (Keycloak may live under `/auth` while the app came in without it, or the other way round).
    static func cookieForFoyer(_ setCookie: String, keycloakPath: String, prefix: String) -> String {
        setCookie.split(separator: ";").compactMap { part -> String? in
            let attribute = part.trimmingCharacters(in: .whitespaces)
            let lowered = attribute.lowercased()
            if lowered.hasPrefix("domain=") { return nil }
            if lowered.hasPrefix("path=") {
                let path = String(attribute.dropFirst("path=".count))
                return "Path=" + replacingPrefix(keycloakPath + "/realms/", with: prefix + "/realms/", in: path)
            }
            return attribute
        }.joined(separator: "; ")
    }
}
