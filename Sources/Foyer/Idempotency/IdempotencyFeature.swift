import Foundation
import Hummingbird

/// `Idempotency-Key` for every unsafe request Foyer answers itself (the JSON API, forms, task writes), by a
/// middleware after authentication and CSRF; `/graphql` applies the same keys to mutations only (a query changes
/// nothing to repeat), in its controller.
struct IdempotencyFeature {
    let keys: IdempotencyKeys

    init(_ app: Foundations) {
        let keys = IdempotencyKeys(store: app.store)
        self.keys = keys
        // Kept answers after their 24 hours, and keys whose first request never answered, every ten minutes.
        app.run(Pruning(what: "idempotency keys", interval: .seconds(600), logger: app.logger) { try await keys.prune() })
    }

    var middleware: IdempotencyMiddleware { IdempotencyMiddleware(keys: keys) }
}

struct IdempotencyMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let keys: IdempotencyKeys

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard Self.writeMethods.contains(request.method), request.uri.path != GraphQLWebSocketController.path,
              let key = try IdempotencyKeys.key(in: request)
        else { return try await next(request, context) }
        // Keys are the caller's own; a request without a session has no caller to keep them for (and a sign-in's
        // answer holds a credential, which is never kept).
        guard let caller = context.identity?.userId else { return try await next(request, context) }
        var request = request
        let body = try await request.collectBody(limitedTo: request.bodyLimit)
        return try await keys.respond(key: key, caller: caller, fingerprint: IdempotencyKeys.fingerprint(request, body: body)) {
            try await next(request, context)
        }
    }

    /// The unsafe methods routes answer; any other (TRACE, a made-up one) goes on to its 405.
    static let writeMethods: Set<HTTPRequest.Method> = [.post, .put, .patch, .delete]
}
