import Foundation
import FoyerServer
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
            let identity = try await authenticator.identity(token: token, credential: credential, request: request)
            context.identity = identity
            if let locale = identity?.user.locale { context.reader.signedIn(locale: locale) }
        }
        return try await next(request, context)
    }

    /// `Authorization: Bearer T`, `Authorization: Token T` or `Token token="T"` (Rails' form), `Authorization: DPoP T`
    /// (a session bound to the app's key), else the session cookie.
    static func presentedToken(_ request: Request) -> (String, Identity.Credential)? {
        if let authorization = request.headers.value(.authorization) {
            return credential(fromAuthorization: authorization)
        }
        if let token = request.cookie(named: SessionCookie.name), !token.isEmpty {
            return (token, .cookie)
        }
        return nil
    }

    /// The token of an `Authorization` value in the Bearer or Token scheme; nil for other schemes.
    static func token(fromAuthorization authorization: String) -> String? {
        guard let (token, credential) = credential(fromAuthorization: authorization), credential == .bearer else { return nil }
        return token
    }

    /// The token of an `Authorization` value and how it was presented: Bearer or Token, or DPoP.
    static func credential(fromAuthorization authorization: String) -> (String, Identity.Credential)? {
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let scheme = parts[0].lowercased()
        // Foundation's trimmingCharacters cost a few microseconds on every signed-in request.
        var value = parts[1].trimmingEnds { $0 == " " || $0 == "\t" }
        let credential: Identity.Credential
        switch scheme {
        case "bearer", "token": credential = .bearer
        case "dpop": credential = .dpop
        default: return nil
        }
        if scheme == "token", value.hasPrefix("token=") {
            value = value.dropFirst("token=".count).prefix { $0 != "," }.trimmingEnds { $0 == "\"" }
        }
        return value.isEmpty ? nil : (String(value), credential)
    }
}

/// Whose token this is: a Foyer session token, or, when providers are configured, an access token an app got
/// for itself from one of them (a JWT, or an opaque token their introspection vouches for).
struct Authenticator: Sendable {
    let sessions: SessionRepository
    let providers: IdentityProviders
    let binding: DeviceKeyBinding

    /// nil for an unknown or revoked session token; AuthenticationRequired for a provider's token that does not verify;
    /// DPoPRefusal for a bound session's token without a good proof, or an unbound one presented as DPoP.
    func identity(token: String, credential: Identity.Credential, request: Request) async throws -> Identity? {
        if credential == .bearer, !providers.isEmpty, UnverifiedJWT.isJWT(token) {
            return try await providers.identity(forAccessToken: token, request: request)
        }
        if let found = try await sessions.lookup(token: token) {
            guard try await binding.admits(found, token: token, credential: credential, request: request) else { return nil }
            return Identity(user: found.user, session: found.session, credential: credential, token: token)
        }
        // Never a token shaped like Foyer's own: those are not the provider's to see.
        guard credential == .bearer, !providers.isEmpty, !SessionRepository.looksLikeSessionToken(token) else { return nil }
        return try await providers.identity(forOpaqueAccessToken: token)
    }
}
