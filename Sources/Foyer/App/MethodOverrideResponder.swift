import HTTPTypes
import Hummingbird

/// HTML forms can only GET and POST. A POST with `_method=patch|put|delete` in its form body is routed as that
/// method, as Rails does. The router picks a route before its middleware runs, so this wraps the router itself.
struct MethodOverrideResponder<Wrapped: HTTPResponder & Sendable>: HTTPResponder, Sendable where Wrapped.Context == FoyerRequestContext {
    typealias Context = FoyerRequestContext
    let wrapped: Wrapped
    /// Errors here happen before the router's middleware, so they are rendered the same way by hand.
    let errors: ErrorMiddleware
    static var overridable: [String: HTTPRequest.Method] { ["patch": .patch, "put": .put, "delete": .delete] }

    func respond(to request: Request, context: Context) async throws -> Response {
        guard request.method == .post, request.isForm else {
            return try await wrapped.respond(to: request, context: context)
        }
        var request = request
        let fields: [String: String]
        do {
            fields = try await request.formFields()
        } catch {
            // Too large (413) or a multipart body that does not parse (400).
            return errors.response(for: error, request: request, context: context)
        }
        if let name = fields["_method"]?.lowercased(), let method = Self.overridable[name] {
            var head = request.head
            head.method = method
            request = Request(head: head, body: request.body)
        }
        return try await wrapped.respond(to: request, context: context)
    }
}
