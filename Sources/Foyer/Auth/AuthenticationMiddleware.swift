import Foundation
import HTTPTypes
import Hummingbird

/// Attaches the caller's identity to the context. Rejects only a provider's token that does not verify
/// (RFC 6750: 401 `invalid_token`); routes decide what needs a user.
struct AuthenticationMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let authenticator: Authenticator

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        if let (token, credential) = Self.presentedToken(request) {
            context.identity = try await authenticator.identity(token: token, credential: credential, request: request)
        }
        return try await next(request, context)
    }

    /// `Authorization: Bearer T`, `Authorization: Token T` or `Token token="T"` (Rails' form), else the session cookie.
    static func presentedToken(_ request: Request) -> (String, Identity.Credential)? {
        if let authorization = request.headers[.authorization] {
            return token(fromAuthorization: authorization).map { ($0, .bearer) }
        }
        if let cookie = request.cookies[SessionCookie.name], !cookie.value.isEmpty {
            return (cookie.value, .cookie)
        }
        return nil
    }

    /// The token of an `Authorization` value in the Bearer or Token scheme; nil for other schemes.
    static func token(fromAuthorization authorization: String) -> String? {
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let scheme = parts[0].lowercased()
        // Foundation's trimmingCharacters cost a few microseconds on every signed-in request.
        var value = parts[1].trimmingEnds { $0 == " " || $0 == "\t" }
        guard scheme == "bearer" || scheme == "token" else { return nil }
        if scheme == "token", value.hasPrefix("token=") {
            value = value.dropFirst("token=".count).prefix { $0 != "," }.trimmingEnds { $0 == "\"" }
        }
        return value.isEmpty ? nil : String(value)
    }
}

/// Whose token this is: a Foyer session token, or, when providers are configured, an access token an app got
/// for itself from one of them (a JWT, or an opaque token their introspection vouches for).
struct Authenticator: Sendable {
    let sessions: SessionRepository
    let providers: IdentityProviders

    /// nil for an unknown or revoked session token; AuthenticationRequired for a provider's token that does not verify.
    func identity(token: String, credential: Identity.Credential, request: Request) async throws -> Identity? {
        if credential == .bearer, !providers.isEmpty, UnverifiedJWT.isJWT(token) {
            return try await providers.identity(forAccessToken: token, request: request)
        }
        if let found = try await sessions.find(token: token) {
            return Identity(user: found.1, session: found.0, credential: credential, token: token)
        }
        // Never a token shaped like Foyer's own: those are not the provider's to see.
        guard credential == .bearer, !providers.isEmpty, !SessionRepository.looksLikeSessionToken(token) else { return nil }
        return try await providers.identity(forOpaqueAccessToken: token)
    }
}
