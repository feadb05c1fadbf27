import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// The sign-in form for browsers and WebViews, and signing out.
struct WebSessionController {
    let signIn: SignIn
    let views: Views

    var form: SignInForm { SignInForm(views: views, signIn: signIn) }

    func addRoutes(to router: FoyerRouter) {
        router.get("/sign_in") { request, context in
            let returnTo = request.uri.queryParameters["return_to"].map(String.init)
            return form.page(request: request, context: context, returnTo: returnTo)
        }
        router.post("/sign_in", use: create)
        router.delete("/session", use: destroy)
        router.post("/sign_out", use: destroy)
    }

    @Sendable func create(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let fields = try await request.formFields(limit: SessionsAPIController.maximumBodySize)
        let email = fields["email"] ?? ""
        let returnTo = fields["return_to"]
        // A cookie-signed-in browser has passed the session's CSRF check already.
        guard context.identity?.credential == .cookie || SignInFormToken.matches(fields[CSRFMiddleware.fieldName], request: request) else {
            context.logger.notice("sign-in form posted without its pre-session token: refused")
            return form.page(
                request: request, context: context, email: email, returnTo: returnTo,
                message: Phrase("sessions.form_expired"), status: .forbidden
            )
        }
        let password = fields["password"] ?? ""
        let verified: SignIn.Verified?
        do {
            if let assertion = fields["passkey"]?.nonEmpty {
                // The page's script put the passkey's assertion (its toJSON()) in the form.
                guard let passkey = try? JSONDecoder().decode(AuthenticationResponseJSON.self, from: Data(assertion.utf8)) else {
                    throw WebAuthnRefusal("the browser sent no passkey Foyer can read")
                }
                verified = try await signIn.verify(passkey: passkey, request: request, context: context)
            } else {
                verified = email.isEmpty || password.isEmpty
                    ? nil : try await signIn.verify(login: email, password: password, request: request, context: context)
            }
        } catch let throttled as SignInThrottle.Throttled {
            return form.page(request: request, context: context, email: email, returnTo: returnTo, throttled: throttled)
        } catch let refusal as WebAuthnRefusal {
            return form.page(
                request: request, context: context, email: email, returnTo: returnTo,
                message: Phrase("sessions.passkey_refused", ["reason": refusal.description]), status: .unprocessableContent
            )
        }
        guard let verified else {
            return form.page(
                request: request, context: context, email: email, returnTo: returnTo, message: Phrase("sessions.wrong_password"), status: .unprocessableContent
            )
        }
        let (_, token, _) = try await signIn.openSession(for: verified, request: request, context: context)
        // A native shell shows sign-in as a modal: dismiss it and reload the screen that asked for it.
        var response = Response.afterSubmit(request, redirectTo: ReturnPath.safe(returnTo, request: request), native: .refresh).flashing(.signedIn)
        response.setCookie(signIn.cookie(token: token, request: request))
        return response
    }

    /// Revokes the session; a browser that signed in through a provider then goes on to its end_session_endpoint
    /// (RP-initiated logout) so its browser session there ends too, and comes back to Foyer from there.
    @Sendable func destroy(request: Request, context: FoyerRequestContext) async throws -> Response {
        var location = "/"
        if let identity = context.identity, let session = identity.session {
            // Read before revoking: revoking drops the session's provider tokens.
            let endSession = try await endSessionURL(forSession: session.id, request: request)
            _ = try await signIn.revoke(session: session.id, userId: identity.userId)
            location = endSession ?? location
        }
        return signIn.signingOut(Response.seeOther(location).flashing(.signedOut), request: request)
    }

    private func endSessionURL(forSession sessionID: String, request: Request) async throws -> String? {
        guard !request.isNativeShell, let (provider, tokens) = try await signIn.providers.ofSession(sessionID),
            provider.settings.frontChannelLogout, let idToken = tokens.idToken,
            let endpoint = try? await provider.client.endpoints().endSessionEndpoint
        else { return nil }
        let settings = provider.settings
        let parameters = [
            "id_token_hint": idToken, "client_id": settings.clientID,
            "post_logout_redirect_uri": settings.postLogoutRedirectURI ?? request.publicOrigin(trustProxy: signIn.trustProxy) + "/",
        ]
        return endpoint + (endpoint.contains("?") ? "&" : "?") + FormEncoding.encode(parameters)
    }
}

/// The sign-in page, wherever someone must sign in: its own route, a protected page's 401, a failed provider return.
struct SignInForm: Sendable {
    let views: Views
    let signIn: SignIn

    /// `sessions/new`: one button per provider, next to the password form (which asks for a username when a
    /// provider holds the passwords).
    struct SignInView: Sendable {
        struct ProviderButton: Sendable {
            /// `keycloak-sign-in`, `acme-sso-sign-in`: what tests and scripts find it by.
            let id: String
            let label: String
            let start: String
        }

        let email: String
        let returnTo: String?
        let message: String?
        let csrfToken: String?
        let providers: [ProviderButton]
        let hasProviders: Bool
        /// Set when a provider checks passwords: its display name.
        let passwordProvider: String?
        /// "Sign up" keeps where the person was going.
        let signUpPath: String
    }

    func page(
        request: Request, context: FoyerRequestContext, email: String = "", returnTo: String?,
        message: Phrase? = nil, status: HTTPResponse.Status = .ok
    ) -> Response {
        let language = views.language(for: request, context: context)
        let buttons = signIn.providers.all.map { provider in
            let path = provider.settings.signInPath
            return SignInView.ProviderButton(
                id: "\(provider.name)-sign-in", label: language.text("sessions.with_provider", ["provider": provider.settings.displayName]),
                start: returnTo.map { path + "?return_to=" + FormEncoding.escape($0) } ?? path
            )
        }
        // Signed in with the cookie, the session's own CSRF token guards the form; otherwise a pre-session token.
        var formCookie: Cookie?
        var csrfToken: String?
        if context.identity?.credential != .cookie {
            let (token, cookie) = SignInFormToken.forPage(request: request, secure: signIn.cookiesAreSecure(for: request))
            (csrfToken, formCookie) = (token, cookie)
        }
        let view = SignInView(
            email: email, returnTo: returnTo, message: message.map(language.say), csrfToken: csrfToken, providers: buttons, hasProviders: !buttons.isEmpty,
            passwordProvider: signIn.providers.passwordChecker?.settings.displayName,
            signUpPath: returnTo.map { "/sign_up?return_to=" + FormEncoding.escape($0) } ?? "/sign_up"
        )
        var response = views.page("sessions/new", ["title": Phrase("sessions.title"), "form_page": true, "signIn": view], request: request, context: context, status: status)
        if let formCookie { response.setCookie(formCookie) }
        return response
    }

    /// Throttled: `429` with `Retry-After`, saying how long.
    func page(
        request: Request, context: FoyerRequestContext, email: String = "", returnTo: String?, throttled: SignInThrottle.Throttled
    ) -> Response {
        page(request: request, context: context, email: email, returnTo: returnTo, message: throttled.phrase, status: .tooManyRequests)
            .retrying(after: throttled)
    }
}

/// Read by name without `Mirror`, which cost the sign-in page more than half its CPU (see PostViews.swift).
extension SignInForm.SignInView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "email": email
        case "returnTo": returnTo
        case "message": message
        case "csrfToken": csrfToken
        case "providers": providers
        case "hasProviders": hasProviders
        case "passwordProvider": passwordProvider
        case "signUpPath": signUpPath
        default: nil
        }
    }
}

extension SignInForm.SignInView.ProviderButton: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "label": label
        case "start": start
        default: nil
        }
    }
}
