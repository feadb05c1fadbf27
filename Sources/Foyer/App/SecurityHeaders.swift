import Foundation
import HTTPTypes
import Hummingbird

/// Headers every answer carries, and a Content-Security-Policy on pages: scripts only from Foyer's own files (no
/// inline script anywhere), no framing by other sites. Styles may be inline: Turbo's progress bar injects a
/// `<style>` (Turbo 7.1 could take a nonce from a `csp-nonce` meta, but a per-request nonce would cost every page a
/// render of the layout for a style, which cannot run code).
struct SecurityHeadersResponder<Wrapped: HTTPResponder & Sendable>: HTTPResponder, Sendable where Wrapped.Context == FoyerRequestContext {
    typealias Context = FoyerRequestContext
    let wrapped: Wrapped
    let contentSecurityPolicy: String

    init(wrapped: Wrapped, turboScriptURL: String) {
        self.wrapped = wrapped
        self.contentSecurityPolicy = Self.policy(turboScriptURL: turboScriptURL)
    }

    static var hstsValue: String { "max-age=31536000; includeSubDomains" }

    func respond(to request: Request, context: Context) async throws -> Response {
        var response = try await wrapped.respond(to: request, context: context)
        response.headers[.xContentTypeOptions] = "nosniff"
        response.headers[.referrerPolicy] = "strict-origin-when-cross-origin"
        if request.cameOverHTTPS {
            response.headers[.strictTransportSecurity] = Self.hstsValue
        }
        if response.headers[.contentType]?.hasPrefix("text/html") == true {
            response.headers[.contentSecurityPolicy] = contentSecurityPolicy
            response.headers[.xFrameOptions] = "SAMEORIGIN"
        }
        return response
    }

    /// Turbo may be served from elsewhere (`--turbo-url https://cdn…`): then that origin is allowed for scripts too.
    static func policy(turboScriptURL: String) -> String {
        var scripts = "'self'"
        if let url = URL(string: turboScriptURL), let scheme = url.scheme, let host = url.host {
            scripts += " \(scheme)://\(host)" + (url.port.map { ":\($0)" } ?? "")
        }
        return [
            "default-src 'self'", "script-src \(scripts)", "style-src 'self' 'unsafe-inline'", "img-src 'self' data:",
            "connect-src 'self'", "object-src 'none'", "base-uri 'self'", "frame-ancestors 'self'",
        ].joined(separator: "; ")
    }
}

extension HTTPField.Name {
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    static let xFrameOptions = HTTPField.Name("X-Frame-Options")!
}
