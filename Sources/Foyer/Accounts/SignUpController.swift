import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// Making an account yourself: the sign-up form for browsers and WebViews, and `POST /api/v1/users` for native
/// screens, answered as a sign-in is. The address is confirmed afterwards, by a mailed link.
struct SignUpController {
    let accounts: AccountFlows
    let views: Views
    var signIn: SignIn { accounts.signIn }

    func addRoutes(to router: FoyerRouter) {
        router.get("/sign_up") { request, context in
            page(request: request, context: context, form: SignUpForm(), returnTo: request.uri.queryParameters["return_to"].map(String.init))
        }
        router.post("/sign_up", use: createFromForm)
        router.post("/api/v1/users", use: createFromAPI)
    }

    /// What someone asked for, read from a form or a JSON body (flat, or nested under `user` as Rails clients send).
    struct SignUpForm: FormOrJSONBody {
        static let expectedJSON = #"{"name": "…", "email": "…", "password": "…", "accept_terms": true}"#
        var name = ""
        var email = ""
        var password = ""
        /// The terms (`/terms`) accepted, as Rails' acceptance validation reads a checkbox: true, "1", "true", "on", "yes".
        var acceptTerms = false
        /// The form's "Sign up with a passkey" button: no password; the account page then makes the passkey.
        var withPasskey = false

        init() {}

        init(fields: [String: String]) {
            name = fields["name"] ?? fields["user[name]"] ?? ""
            email = fields["email"] ?? fields["user[email]"] ?? ""
            password = fields["password"] ?? fields["user[password]"] ?? ""
            acceptTerms = Self.isAcceptance(fields["accept_terms"] ?? fields["user[accept_terms]"])
            withPasskey = fields["with"] == "passkey"
        }

        private enum CodingKeys: String, CodingKey {
            case name, email, password, user
            case acceptTerms = "accept_terms"
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let fields = (try? container.nestedContainer(keyedBy: CodingKeys.self, forKey: .user)) ?? container
            name = try fields.decodeIfPresent(String.self, forKey: .name) ?? ""
            email = try fields.decodeIfPresent(String.self, forKey: .email) ?? ""
            password = try fields.decodeIfPresent(String.self, forKey: .password) ?? ""
            if let accepted = try? fields.decodeIfPresent(Bool.self, forKey: .acceptTerms) {
                acceptTerms = accepted
            } else {
                acceptTerms = Self.isAcceptance(try? fields.decodeIfPresent(String.self, forKey: .acceptTerms))
            }
        }

        static func isAcceptance(_ value: String?) -> Bool {
            ["1", "true", "on", "yes"].contains(value?.lowercased() ?? "")
        }
    }

    /// `registrations/new`: the form, each field with what is wrong with it.
    struct SignUpView: Sendable {
        let name: FormField
        let email: FormField
        let password: FormField
        let acceptTerms: FormField
        let termsAccepted: Bool
        let errors: [String]
        let hasErrors: Bool
        let csrfToken: String?
        let returnTo: String?
        /// "Sign in" keeps where the person was going.
        let signInPath: String
    }

    func page(
        request: Request, context: FoyerRequestContext, form: SignUpForm, returnTo: String?, errors: ValidationFailed? = nil,
        message: String? = nil, status: HTTPResponse.Status = .ok
    ) -> Response {
        let fieldErrors = errors?.errors ?? [:]
        let language = views.language(for: request, context: context)
        var formCookie: Cookie?
        var csrfToken: String?
        if context.identity?.credential != .cookie {
            (csrfToken, formCookie) = SignInFormToken.forPage(request: request, secure: signIn.cookiesAreSecure(for: request))
        }
        let view = SignUpView(
            name: FormField("name", value: form.name, errors: fieldErrors, in: language), email: FormField("email", value: form.email, errors: fieldErrors, in: language),
            password: FormField("password", value: "", errors: fieldErrors, in: language),
            acceptTerms: FormField("accept_terms", value: "", errors: fieldErrors, in: language), termsAccepted: form.acceptTerms,
            errors: message.map { [$0] } ?? errors?.fullMessages(in: language) ?? [], hasErrors: message != nil || errors != nil, csrfToken: csrfToken,
            returnTo: returnTo, signInPath: returnTo.map { "/sign_in?return_to=" + FormEncoding.escape($0) } ?? "/sign_in"
        )
        var response = views.page("registrations/new", ["title": Phrase("sign_up.title"), "form_page": true, "signUp": view], request: request, context: context, status: status)
        if let formCookie { response.setCookie(formCookie) }
        return response
    }

    @Sendable func createFromForm(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let fields = try await request.formFields(limit: SessionsAPIController.maximumBodySize)
        let form = SignUpForm(fields: fields)
        let returnTo = fields["return_to"]
        guard context.identity?.credential == .cookie || SignInFormToken.matches(fields[CSRFMiddleware.fieldName], request: request) else {
            context.logger.notice("sign-up form posted without its pre-session token: refused")
            return page(
                request: request, context: context, form: form, returnTo: returnTo,
                message: "This form has expired or did not come from this site. Please try again.", status: .forbidden
            )
        }
        let user: User
        do {
            user = try await signUp(form, request: request, context: context)
        } catch let invalid as ValidationFailed {
            return page(request: request, context: context, form: form, returnTo: returnTo, errors: invalid, status: .unprocessableContent)
        } catch let throttled as SignInThrottle.Throttled {
            return page(request: request, context: context, form: form, returnTo: returnTo, message: throttled.message, status: .tooManyRequests)
                .retrying(after: throttled)
        }
        let (_, token, _) = try await signIn.openSession(for: .init(user: user), request: request, context: context)
        var response = form.withPasskey
            ? Response.seeOther("/account#passkeys").flashing(.signedUpAddPasskey)
            : Response.afterSubmit(request, redirectTo: ReturnPath.safe(returnTo, request: request), native: .refresh).flashing(.signedUp)
        response.setCookie(signIn.cookie(token: token, request: request))
        return response
    }

    @Sendable func createFromAPI(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let form = try await request.decodeBody(as: SignUpForm.self)
        let proof = try await signIn.signInProof(of: request)
        let user = try await signUp(form, request: request, context: context)
        return try await SessionsAPIController.signedIn(.init(user: user), signIn: signIn, proof: proof, request: request, context: context)
    }

    /// The account, and the mail that asks to confirm its address, in one transaction. Each client may sign up
    /// `SignInThrottle.perClient` times in the throttle's window.
    private func signUp(_ form: SignUpForm, request: Request, context: FoyerRequestContext) async throws -> User {
        if let provider = signIn.providers.passwordChecker {
            throw AppError(
                .notFound, title: "Sign up at \(provider.settings.displayName)",
                message: "\(provider.settings.displayName) holds the accounts here: sign up there, then sign in."
            )
        }
        try await accounts.throttle.countRequest("sign-up", clientIP: request.clientIP(context: context, trustProxy: signIn.trustProxy))
        let mail = accounts.mail
        let password = form.withPasskey ? nil : form.password
        // The account keeps the language it was made in: its mail goes out in it, whatever device sends it.
        let locale = views.language(for: request, context: context).tag
        let user = try await signIn.users.signUp(
            name: form.name, email: form.email, password: password, acceptsTerms: form.acceptTerms, locale: locale
        ) { user in
            mail.confirmation(for: user, address: user.email, welcome: true)
        }
        accounts.outbox.nudge()
        context.logger.info("signed up", metadata: ["user": "\(user.id ?? 0)"])
        return user
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension SignUpController.SignUpView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "name": self.name
        case "email": email
        case "password": password
        case "acceptTerms": acceptTerms
        case "termsAccepted": termsAccepted
        case "errors": errors
        case "hasErrors": hasErrors
        case "csrfToken": csrfToken
        case "returnTo": returnTo
        case "signInPath": signInPath
        default: nil
        }
    }
}
