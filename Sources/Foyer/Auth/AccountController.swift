import Foundation
import HTTPTypes
import Hummingbird

/// `/account`: who is signed in, and every device signed in as them, each revocable.
struct AccountController {
    let signIn: SignIn
    let views: Views
    /// Claims that are times, shown as times.
    static let timeClaims: Set<String> = ["exp", "iat", "nbf", "auth_time", "updated_at"]

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.get("/account", use: show)
        signedIn.delete("/account/sessions/{id}", use: revokeSession)
    }

    @Sendable func show(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let sessions = try await signIn.sessions.list(userId: identity.userId)
        let rows: [[String: Any]] = sessions.map { session in
            [
                "id": session.id,
                "device": session.userAgent ?? "Unknown device",
                "ip_address": session.ipAddress ?? "unknown",
                "created_at": Views.timestamp(session.createdAt),
                "last_seen_at": Views.timestamp(session.lastSeenAt),
                "current": session.id == identity.session?.id,
            ]
        }
        var values: [String: Any] = ["title": "Your account", "email": identity.user.email, "sessions": rows]
        if let claims = try await signIn.keycloak?.claims(of: identity) {
            values["keycloak"] = ["claims": Self.readable(claims), "own_token": identity.keycloakToken != nil]
        }
        return views.page("account/show", values, request: request, context: context)
    }

    /// One row per claim, sorted by name: times as times, lists as lists, nested objects as compact JSON.
    static func readable(_ claims: [String: Any]) -> [[String: String]] {
        claims.keys.sorted().map { name in
            let value = claims[name]!
            let text: String
            switch value {
            case let seconds as Double where timeClaims.contains(name):
                text = Views.timestamp(Date(timeIntervalSince1970: seconds))
            case let seconds as Int where timeClaims.contains(name):
                text = Views.timestamp(Date(timeIntervalSince1970: TimeInterval(seconds)))
            case let list as [Any]:
                text = list.map { "\($0)" }.joined(separator: ", ")
            case let string as String:
                text = string
            case is Bool, is Int, is Double:
                text = "\(value)"
            default:
                let json = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes])
                text = json.map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"
            }
            return ["name": name, "value": text]
        }
    }

    @Sendable func revokeSession(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let id = try context.parameters.require("id")
        guard try await signIn.revoke(session: id, userId: identity.userId) else {
            throw AppError(.notFound, message: "You have no active session with that id.")
        }
        guard id == identity.session?.id else { return .seeOther("/account") }
        var response = Response.seeOther("/")
        response.setCookie(signIn.expiredCookie(request: request))
        return response
    }
}
