import Foundation
import HTTPTypes
import Hummingbird

/// Attaches the identity of a live session to the context; rejects nothing (routes decide what needs a user).
struct AuthenticationMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let sessions: SessionStore

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        if let (token, credential) = Self.presentedToken(request),
            let (session, user) = try await sessions.find(token: token)
        {
            context.identity = Identity(user: user, session: session, credential: credential, token: token)
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
        var value = parts[1].trimmingCharacters(in: .whitespaces)
        guard scheme == "bearer" || scheme == "token" else { return nil }
        if scheme == "token", value.hasPrefix("token=") {
            value = String(value.dropFirst("token=".count).prefix { $0 != "," })
                .trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
        return value.isEmpty ? nil : value
    }
}
