import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// The pages mailed links open, and what their buttons do: confirming an address, and choosing a new password
/// after a forgotten one. Opening a link changes nothing (mail scanners open every link); pressing its button does.
struct MailedLinksController {
    /// At most this many reset mails per address per hour; further requests are answered alike and send nothing.
    static let resetsPerHour = 3

    let accounts: AccountFlows
    let views: Views

    func addRoutes(to router: FoyerRouter) {
        router.get("/email_confirmations/{token}", use: showConfirmation)
        router.post("/email_confirmations/{token}", use: confirm)
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.post("/account/email_confirmation", use: resendConfirmationFromPage)
        signedIn.post("/api/v1/me/email_confirmation", use: resendConfirmation)

        router.get("/password_resets/new") { request, context in
            views.page("password_resets/new", ["title": Phrase("sessions.forgot_password"), "form_page": true], request: request, context: context)
        }
        router.post("/password_resets", use: requestResetFromForm)
        router.post("/api/v1/password_resets", use: requestReset)
        router.get("/password_resets/{token}", use: showReset)
        router.post("/password_resets/{token}", use: reset)
        router.patch("/password_resets/{token}", use: reset)
    }

    static func expired(_ what: String) -> AppError {
        AppError(
            .notFound, title: "This link is no longer good",
            message: "This \(what) link was used already, has expired, or was never ours. Ask for a new one."
        )
    }

    // MARK: Confirming an address

    /// `account/confirm_email`: the address, and the button that confirms it.
    struct ConfirmView: Sendable {
        let email: String
        let name: String
        let action: String
        let change: Bool
    }

    @Sendable func showConfirmation(request: Request, context: FoyerRequestContext) async throws -> Response {
        let secret = try context.parameters.require("token")
        guard let (token, user) = try await accounts.storage.token(hash: AccountToken.hash(secret), purpose: .confirmEmail, now: Date()) else {
            throw Self.expired("confirmation")
        }
        let view = ConfirmView(
            email: token.email, name: user.name, action: "/email_confirmations/\(secret)", change: token.email.lowercased() != user.email.lowercased()
        )
        var response = views.page("account/confirm_email", ["title": Phrase("confirm.title"), "confirm": view], request: request, context: context)
        response.headers[.cacheControl] = "no-store"
        response.headers[.referrerPolicy] = "no-referrer"
        return response
    }

    @Sendable func confirm(request: Request, context: FoyerRequestContext) async throws -> Response {
        let secret = try context.parameters.require("token")
        let user: User?
        do {
            user = try await accounts.storage.confirmEmail(tokenHash: AccountToken.hash(secret), now: Date())
        } catch UserError.emailTaken {
            throw AppError(.conflict, title: Phrase("mailed_links.errors.taken.title"), message: Phrase("mailed_links.errors.taken"))
        }
        guard let user, let id = user.id else { throw Self.expired("confirmation") }
        accounts.accountChanged(userId: id)
        context.logger.info("address confirmed", metadata: ["user": "\(id)"])
        let next = context.identity?.userId == id ? "/account" : (context.identity == nil ? "/sign_in" : "/")
        return Response.seeOther(next).flashing(.emailConfirmed)
    }

    @Sendable func resendConfirmationFromPage(request: Request, context: SignedInContext) async throws -> Response {
        try await mailConfirmation(to: context.identity.user)
        return Response.seeOther("/account").flashing(.confirmationMailed)
    }

    /// Another link to confirm the account's address, for a mail that got lost: `202`.
    @Sendable func resendConfirmation(request: Request, context: SignedInContext) async throws -> Response {
        try await mailConfirmation(to: context.identity.user)
        return Response.json(["message": views.language(for: request, context: context).say(Flash.confirmationMailed.phrase)], status: .accepted)
    }

    private func mailConfirmation(to user: User) async throws {
        guard user.emailConfirmedAt == nil else {
            throw AppError(.conflict, title: Phrase("mailed_links.errors.confirmed.title"), message: Phrase("mailed_links.errors.confirmed", ["email": user.email]))
        }
        try await accounts.storage.update(
            userId: user.id ?? 0, name: nil, passwordHash: nil, writes: accounts.mail.confirmation(for: user, address: user.email, welcome: false),
            now: Date()
        )
        accounts.outbox.nudge()
    }

    // MARK: A forgotten password

    /// The same answer whether or not the address has an account, and whether or not mail went (the hourly cap).
    @Sendable func requestReset(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let email = try await request.decodeBody(as: ResetRequest.self).email
        guard let email, !email.isBlank else { throw ValidationFailed(errors: ["email": [Phrase("errors.blank")]]) }
        try await mailReset(to: email, request: request, context: context)
        return Response.json(["message": views.language(for: request, context: context).say(Flash.resetMailed.phrase)], status: .accepted)
    }

    struct ResetRequest: FormOrJSONBody {
        static let expectedJSON = #"{"email": "…"}"#
        let email: String?
        init(fields: [String: String]) { email = fields["email"] }
    }

    @Sendable func requestResetFromForm(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let email = try await request.formFields(limit: SessionsAPIController.maximumBodySize)["email"] ?? ""
        func form(_ message: Phrase, status: HTTPResponse.Status) -> Response {
            let view = ["email": FormField("email", value: email, errors: ["email": [message]], in: views.language(for: request, context: context))]
            return views.page(
                "password_resets/new", ["title": Phrase("sessions.forgot_password"), "form_page": true, "reset": view], request: request, context: context,
                status: status
            )
        }
        guard !email.isBlank else { return form(Phrase("errors.blank"), status: .unprocessableContent) }
        do {
            try await mailReset(to: email, request: request, context: context)
        } catch let throttled as SignInThrottle.Throttled {
            let message = Phrase("errors.asked_too_often", count: (throttled.retryAfter + 59) / 60)
            return form(message, status: .tooManyRequests).retrying(after: throttled)
        }
        return Response.seeOther("/sign_in").flashing(.resetMailed)
    }

    private func mailReset(to email: String, request: Request, context: FoyerRequestContext) async throws {
        try await accounts.throttle.countRequest(
            "password-reset", clientIP: request.clientIP(context: context, trustProxy: accounts.signIn.trustProxy)
        )
        let mail = accounts.mail
        let now = Date()
        let mailed = try await accounts.storage.requestReset(
            email: User.normalize(email: email), since: now.addingTimeInterval(-3600), cap: Self.resetsPerHour
        ) { user in mail.passwordReset(for: user, now: now) }
        if mailed { accounts.outbox.nudge() }
        // Said the same way either way in the answer; the log may tell the operator.
        context.logger.info("password reset asked for", metadata: ["mailed": "\(mailed)"])
    }

    /// `password_resets/edit`: the new password's field.
    struct ResetView: Sendable {
        let action: String
        let email: String
        let password: FormField
    }

    @Sendable func showReset(request: Request, context: FoyerRequestContext) async throws -> Response {
        let secret = try context.parameters.require("token")
        guard let (_, user) = try await accounts.storage.token(hash: AccountToken.hash(secret), purpose: .resetPassword, now: Date()) else {
            throw Self.expired("password reset")
        }
        return resetPage(secret: secret, user: user, request: request, context: context)
    }

    private func resetPage(
        secret: String, user: User, errors: [String: [Phrase]] = [:], request: Request, context: FoyerRequestContext,
        status: HTTPResponse.Status = .ok
    ) -> Response {
        let view = ResetView(action: "/password_resets/\(secret)", email: user.email, password: FormField("password", value: "", errors: errors, in: views.language(for: request, context: context))
        )
        var response = views.page(
            "password_resets/edit", ["title": Phrase("resets.edit.title"), "form_page": true, "reset": view], request: request, context: context,
            status: status
        )
        response.headers[.cacheControl] = "no-store"
        response.headers[.referrerPolicy] = "no-referrer"
        return response
    }

    @Sendable func reset(request: Request, context: FoyerRequestContext) async throws -> Response {
        var request = request
        let secret = try context.parameters.require("token")
        let password = try await request.formFields(limit: SessionsAPIController.maximumBodySize)["password"] ?? ""
        let now = Date()
        guard let (_, found) = try await accounts.storage.token(hash: AccountToken.hash(secret), purpose: .resetPassword, now: now) else {
            throw Self.expired("password reset")
        }
        let problems = PasswordRules.problems(password, email: found.email)
        guard problems.isEmpty else {
            return resetPage(secret: secret, user: found, errors: ["password": problems], request: request, context: context, status: .unprocessableContent)
        }
        let hash = try await accounts.signIn.users.passwords.hash(password)
        let mail = accounts.mail
        guard let user = try await accounts.storage.resetPassword(tokenHash: AccountToken.hash(secret), newHash: hash, now: now, writes: {
            mail.passwordChanged(for: $0)
        }), let id = user.id else {
            throw Self.expired("password reset")
        }
        accounts.outbox.nudge()
        // Whoever knew the old password is out, everywhere: sessions, their streams and websockets.
        try await accounts.endSessions(of: id, except: nil)
        accounts.accountChanged(userId: id)
        context.logger.info("password reset", metadata: ["user": "\(id)"])
        var response = Response.seeOther("/sign_in").flashing(.passwordReset)
        if context.identity?.userId == id { response.setCookie(accounts.signIn.expiredCookie(request: request)) }
        return response
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension MailedLinksController.ConfirmView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "email": email
        case "name": self.name
        case "action": action
        case "change": change
        default: nil
        }
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension MailedLinksController.ResetView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "action": action
        case "email": email
        case "password": password
        default: nil
        }
    }
}
