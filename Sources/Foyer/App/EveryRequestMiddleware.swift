import Hummingbird

/// The middleware every request passes, in order, as one type. Hummingbird keeps a router's middleware as
/// existentials, so a stack of its generic `_Middleware2` runs unspecialized and gives the executor up between each
/// two; here each member is a concrete type called from the one before, which the compiler specializes and inlines.
struct EveryRequestMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let log: RequestLogMiddleware
    let compression: CompressionMiddleware
    let errors: ErrorMiddleware
    let methodNotAllowed: MethodNotAllowedMiddleware
    let publicFiles: PublicFiles
    /// Before authentication: the realm's own pages, when Keycloak is configured.
    let keycloakProxy: KeycloakProxyMiddleware?
    let authentication: AuthenticationMiddleware
    let csrf: CSRFMiddleware
    let idempotency: IdempotencyMiddleware

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await log.handle(request, context: context) { request, context in
            try await compression.handle(request, context: context) { request, context in
                try await errors.handle(request, context: context) { request, context in
                    try await methodNotAllowed.handle(request, context: context) { request, context in
                        try await publicFiles.handle(request, context: context) { request, context in
                            guard let keycloakProxy else { return try await signedIn(request, context: context, next: next) }
                            return try await keycloakProxy.handle(request, context: context) { request, context in
                                try await signedIn(request, context: context, next: next)
                            }
                        }
                    }
                }
            }
        }
    }

    /// From authentication on.
    private func signedIn(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await authentication.handle(request, context: context) { request, context in
            try await csrf.handle(request, context: context) { request, context in
                try await idempotency.handle(request, context: context, next: next)
            }
        }
    }
}
