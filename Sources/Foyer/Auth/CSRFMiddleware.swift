import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// A cookie rides along with any cross-site form post; the per-session token in the page does not.
/// So every unsafe request authenticated by the cookie must echo it, as `X-CSRF-Token` or the `authenticity_token` field.
struct CSRFMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    static let headerName = HTTPField.Name("X-CSRF-Token")!
    static let fieldName = "authenticity_token"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let identity = context.identity, identity.credential == .cookie, !request.method.isSafe else {
            return try await next(request, context)
        }
        var request = request
        var presented = request.headers[Self.headerName]
        if presented == nil, request.isFormEncoded {
            presented = try await request.formFields()[Self.fieldName]
        }
        guard let presented, let expected = identity.session?.csrfToken, Self.constantTimeEquals(presented, expected) else {
            throw AppError(
                .forbidden, title: "This form has expired",
                message: "The request did not carry a valid CSRF token. Reload the page and try again."
            )
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
