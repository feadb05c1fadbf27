import HTTPTypes
import Hummingbird

/// The sign-in form for browsers and WebViews, and signing out.
struct WebSessionController {
    let signIn: SignIn
    let views: Views

    func addRoutes(to router: Router<FoyerRequestContext>) {
        router.get("/sign_in") { request, context in
            let returnTo = request.uri.queryParameters["return_to"].map(String.init)
            return Self.signInPage(request: request, context: context, views: views, email: "", returnTo: returnTo)
        }
        router.post("/sign_in", use: create)
        router.delete("/session", use: destroy)
        router.post("/sign_out", use: destroy)
    }

    static func signInPage(
        request: Request, context: FoyerRequestContext, views: Views, email: String, returnTo: String?,
        message: String? = nil, status: HTTPResponse.Status = .ok
    ) -> Response {
        var values: [String: Any] = ["title": "Sign in", "email": email, "form_page": true]
        if views.keycloakSignIn {
            let start = returnTo.map { "/sign_in/keycloak?return_to=" + FormEncoding.escape($0) } ?? "/sign_in/keycloak"
            values["keycloak"] = ["start": start]
        }
        values["return_to"] = returnTo
        values["message"] = message
        return views.page("sessions/new", values, request: request, context: context, status: status)
    }

    @Sendable func create(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let fields = try await request.formFields(limit: SessionsAPIController.maximumBodySize)
        let email = fields["email"] ?? ""
        let returnTo = fields["return_to"]
        guard !email.isEmpty, let password = fields["password"], !password.isEmpty,
            let verified = try await signIn.verify(login: email, password: password)
        else {
            return Self.signInPage(
                request: request, context: context, views: views, email: email, returnTo: returnTo,
                message: SignIn.wrongCredentials, status: .unprocessableContent
            )
        }
        let (_, token) = try await signIn.openSession(for: verified, request: request, context: context)
        // A native shell shows sign-in as a modal: dismiss it and reload the screen that asked for it.
        var response = Response.afterSubmit(request, redirectTo: ReturnPath.safe(returnTo, request: request), native: .refresh)
        response.setCookie(signIn.cookie(token: token, request: request))
        return response
    }

    @Sendable func destroy(request: Request, context: FoyerRequestContext) async throws -> Response {
        if let identity = context.identity, let session = identity.session {
            _ = try await signIn.revoke(session: session.id, userId: identity.userId)
        }
        var response = Response.seeOther("/")
        response.setCookie(signIn.expiredCookie(request: request))
        return response
    }
}
