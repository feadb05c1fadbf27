import Crypto
import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird

/// A cookie rides along with any cross-site form post; the per-session token in the page does not.
/// So every unsafe request authenticated by the cookie must echo it, as `X-CSRF-Token` or the `authenticity_token`
/// field. Before that, a request a browser says came from another site is refused outright when it carries cookies
/// or would set the session cookie (login CSRF: signing a visitor into someone else's account).
struct CSRFMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    static let headerName = HTTPField.Name("X-CSRF-Token")!
    static let fieldName = "authenticity_token"
    /// Routes whose answer sets the session cookie: refused cross-site even without a cookie.
    static let signInPaths: Set<String> = ["/sign_in", "/api/v1/sessions", "/api/v1/sessions.json", "/sign_up", "/api/v1/users"]
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // Server-to-server routes: no browser, no cookie, their own proof (a signed logout token).
        guard !request.method.isSafe, !BackChannelLogoutController.isLogoutPath(request.uri.path) else {
            return try await next(request, context)
        }
        if let origin = request.crossSiteOrigin, request.headers.value(.cookie) != nil || Self.signInPaths.contains(request.uri.path) {
            throw AppError(
                .forbidden, title: "Cross-site request refused",
                message: "This request came from another site (\(origin)). Foyer takes forms and sign-ins only from its own pages."
            )
        }
        guard let identity = context.identity, identity.credential == .cookie else {
            return try await next(request, context)
        }
        var request = request
        var presented = request.headers.value(Self.headerName)
        if presented == nil, request.isForm {
            presented = try await request.formFields()[Self.fieldName]
        }
        guard let presented, let expected = identity.session?.csrfToken, Self.constantTimeEquals(presented, expected) else {
            throw AppError(.forbidden, title: Phrase("errors.csrf.title"), message: Phrase("errors.csrf.message"))
        }
        return try await next(request, context)
    }

    static func constantTimeEquals(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

extension HTTPRequest.Method {
    var isSafe: Bool { self == .get || self == .head || self == .options }
}

extension Request {
    /// What a browser says about where a request came from, when that is another site: `Sec-Fetch-Site: cross-site`,
    /// or an `Origin` naming another host (or `null`, a sandboxed or privacy-stripped origin). nil for same-site
    /// requests and for clients that send neither (native code, curl). The host is compared with `Host` and
    /// `X-Forwarded-Host`, which a page cannot set, so a load balancer that rewrites `Host` does not break forms.
    var crossSiteOrigin: String? {
        if headers.value(.secFetchSite)?.lowercased() == "cross-site" {
            return headers.value(.origin).map { "Origin \($0)" } ?? "Sec-Fetch-Site: cross-site"
        }
        guard let origin = headers.value(.origin) else { return nil }
        guard origin != "null", let url = URL(string: origin), let host = url.host else { return "Origin \(origin)" }
        let authority = (host + (url.port.map { ":\($0)" } ?? "")).lowercased()
        var ours = [head.authority?.lowercased()]
        ours += headers[values: .xForwardedHost].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        return ours.contains(authority) ? nil : "Origin \(origin)"
    }
}

extension HTTPField.Name {
    static let secFetchSite = HTTPField.Name("Sec-Fetch-Site")!
}
