import Foundation
import HTTPTypes
import Hummingbird

/// `/account`: who is signed in, and every device signed in as them, each revocable.
struct AccountController {
    let signIn: SignIn
    let views: Views

    func addRoutes(to router: Router<FoyerRequestContext>) {
        router.get("/account", use: show)
        router.delete("/account/sessions/{id}", use: revokeSession)
    }

    @Sendable func show(request: Request, context: FoyerRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
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
        return views.page(
            "account/show",
            ["title": "Your account", "email": identity.user.email, "sessions": rows],
            request: request, context: context
        )
    }

    @Sendable func revokeSession(request: Request, context: FoyerRequestContext) async throws -> Response {
        let identity = try context.requireIdentity()
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
