import Foundation
import HTTPTypes
import Hummingbird

/// Headers every answer carries: `nosniff`, a referrer policy, HSTS over https. Added only where the answer has
/// none of its own: the Keycloak pages Foyer forwards keep Keycloak's. (Foyer's own pages get their
/// Content-Security-Policy where they are made, in `Views.page`, so forwarded pages never get Foyer's.)
struct SecurityHeadersResponder<Wrapped: HTTPResponder & Sendable>: HTTPResponder, Sendable where Wrapped.Context == FoyerRequestContext {
    typealias Context = FoyerRequestContext
    let wrapped: Wrapped

    func respond(to request: Request, context: Context) async throws -> Response {
        var response = try await wrapped.respond(to: request, context: context)
        for field in SecurityHeaderFields.everywhere where !response.headers.has(field.name) {
            response.headers.append(field)
        }
        if request.cameOverHTTPS, !response.headers.has(.strictTransportSecurity) {
            response.headers.append(SecurityHeaderFields.overHTTPS)
        }
        return response
    }
}

/// The fields themselves, made once (generic types cannot hold stored statics).
enum SecurityHeaderFields {
    static let everywhere = [
        HTTPField(name: .xContentTypeOptions, value: "nosniff"),
        HTTPField(name: .referrerPolicy, value: "strict-origin-when-cross-origin"),
    ]
    static let overHTTPS = HTTPField(name: .strictTransportSecurity, value: "max-age=31536000; includeSubDomains")

    /// On Foyer's pages: scripts only from Foyer's own files (no inline script anywhere), no framing by other sites.
    /// Images may be `blob:` URLs: the post form previews the picture chosen before it is sent.
    /// Styles may be inline: Turbo's progress bar injects a `<style>` (Turbo 7.1 could take a nonce from a
    /// `csp-nonce` meta, but a per-request nonce would cost every page a render of the layout for a style, which
    /// cannot run code).
    static func onPages(turboScriptURL: String) -> [HTTPField] {
        [
            HTTPField(name: .contentSecurityPolicy, value: policy(turboScriptURL: turboScriptURL)),
            HTTPField(name: .xFrameOptions, value: "SAMEORIGIN"),
        ]
    }

    /// Turbo may be served from elsewhere (`--turbo-url https://cdn…`): then that origin is allowed for scripts too.
    static func policy(turboScriptURL: String) -> String {
        var scripts = "'self'"
        if let url = URL(string: turboScriptURL), let scheme = url.scheme, let host = url.host {
            scripts += " \(scheme)://\(host)" + (url.port.map { ":\($0)" } ?? "")
        }
        return [
            "default-src 'self'", "script-src \(scripts)", "style-src 'self' 'unsafe-inline'", "img-src 'self' data: blob:",
            "connect-src 'self'", "object-src 'none'", "base-uri 'self'", "frame-ancestors 'self'",
        ].joined(separator: "; ")
    }
}

extension HTTPField.Name {
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    static let xFrameOptions = HTTPField.Name("X-Frame-Options")!
}
