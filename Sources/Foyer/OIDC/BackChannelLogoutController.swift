import Foundation
import Hummingbird

/// OpenID Connect Back-Channel Logout 1.0: the provider POSTs a signed `logout_token` here when one of its sessions
/// ends (the user signed out elsewhere, an admin ended it, it expired), and Foyer ends the sessions opened with it.
/// Server to server: no cookie, no CSRF token; the token's signature is the proof. Register
/// `https://<foyer>/sign_in/{provider}/backchannel_logout` as the client's back-channel logout URL at the provider
/// (Keycloak: "Backchannel logout URL").
struct BackChannelLogoutController {
    let provider: ProviderSessions

    /// `/sign_in/{provider}/backchannel_logout`, whatever the provider.
    static func isLogoutPath(_ path: String) -> Bool {
        path.hasPrefix("/sign_in/") && path.hasSuffix("/backchannel_logout") && path.utf8.count < 128
    }

    func addRoutes(to router: FoyerRouter) {
        router.post(RouterPath(stringLiteral: provider.settings.signInPath + "/backchannel_logout"), use: logout)
    }

    /// `200` when the token checks out (also when no session of ours had that sid: logging out is idempotent),
    /// `400` with `{"error": "invalid_request", "error_description": …}` otherwise (§2.8), no caching.
    @Sendable func logout(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let fields: [String: String]
        do {
            fields = try await request.formFields(limit: 64 * 1024)
        } catch {
            return Self.refusal("The body is larger than a logout token can be")
        }
        guard request.isFormEncoded, let token = fields["logout_token"], !token.isEmpty else {
            return Self.refusal("Send logout_token as an application/x-www-form-urlencoded field")
        }
        let verified: VerifiedToken
        do {
            verified = try await provider.verifier.verify(
                token, issuers: try await provider.acceptedIssuers(for: request), use: .logoutToken(clientID: provider.settings.clientID)
            )
        } catch let rejected as TokenRejected {
            context.logger.notice("back-channel logout token refused: \(rejected)")
            return Self.refusal(rejected.description)
        }
        let claims = verified.claims
        let ended = try await provider.endSessions(providerSession: claims["sid"] as? String, subject: claims["sub"] as? String)
        return Response.json(["sessions_ended": ended], status: .ok).noStore()
    }

    static func refusal(_ description: String) -> Response {
        Response.json(["error": "invalid_request", "error_description": description], status: .badRequest).noStore()
    }
}

extension Response {
    func noStore() -> Response {
        var response = self
        response.headers[.cacheControl] = "no-store"
        return response
    }
}
