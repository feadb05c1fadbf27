import Foundation
import HTTPTypes
import Hummingbird
import Mustache
import Logging

/// Changing an account (its name, password and address), deleting it with everything in it, and taking its data
/// away: on `/account` for browsers and WebViews, and at `/api/v1/me` for native screens.
struct AccountSettingsController {
    /// A provider's account proves it is its owner by a sign-in this recent (it has no password here to type).
    static let recentSignIn: TimeInterval = 10 * 60

    let accounts: AccountFlows
    let accountPage: AccountController
    let posts: PostRepository

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.patch("/api/v1/me", use: updateFromAPI)
        signedIn.delete("/api/v1/me", use: deleteFromAPI)
        signedIn.get("/api/v1/me/export", use: export)
        signedIn.patch("/account", use: updateName)
        signedIn.patch("/account/password", use: updatePassword)
        signedIn.patch("/account/email", use: updateEmail)
        signedIn.patch("/account/language", use: updateLanguage)
        signedIn.get("/account/delete", use: showDeletion)
        signedIn.delete("/account", use: deleteFromPage)
    }

    /// What `PATCH /api/v1/me` and the account page's forms may ask for. Nil fields are left as they are.
    struct Changes: FormOrJSONBody {
        static let expectedJSON = #"{"name", "email", "password", "current_password", "locale"}, each optional"#
        var name: String?
        var email: String?
        var password: String?
        var currentPassword: String?
        /// A language tag (`pt-BR`); "" goes back to the browser's language.
        var locale: String?

        enum CodingKeys: String, CodingKey { case name, email, password, currentPassword = "current_password", locale, user }

        init(name: String? = nil, email: String? = nil, password: String? = nil, currentPassword: String? = nil, locale: String? = nil) {
            (self.name, self.email, self.password, self.currentPassword, self.locale) = (name, email, password, currentPassword, locale)
        }

        init(fields: [String: String]) {
            self.init(
                name: fields["name"], email: fields["email"], password: fields["password"], currentPassword: fields["current_password"],
                locale: fields["locale"]
            )
        }

        init(from decoder: any Decoder) throws {
            let outer = try decoder.container(keyedBy: CodingKeys.self)
            let fields = (try? outer.nestedContainer(keyedBy: CodingKeys.self, forKey: .user)) ?? outer
            // A key left out is left as it is; a key given as null (or not a string) is a mistake, not "unchanged".
            func field(_ key: CodingKeys) throws -> String? { fields.contains(key) ? try fields.decode(String.self, forKey: key) : nil }
            name = try field(.name)
            email = try field(.email)
            password = try field(.password)
            currentPassword = try field(.currentPassword)
            locale = try field(.locale)
        }
    }

    /// What a change did, for the answer: which notices to show.
    struct Applied {
        var nameChanged = false
        var passwordChanged = false
        var emailChangeMailed = false
        var languageChanged = false
    }

    /// Checks every field first (all problems at once, nothing stored when any is wrong), then stores what was asked.
    func apply(_ changes: Changes, identity: Identity, clientIP: String?) async throws -> Applied {
        let user = identity.user
        var errors: [String: [Phrase]] = [:]
        var name: String?
        if let raw = changes.name {
            let tidy = UserRepository.tidy(name: raw)
            errors.merge(UserRepository.nameErrors(tidy)) { $0 + $1 }
            if tidy != user.name { name = tidy }
        }
        let newEmail = changes.email.map(User.normalize(email:)).flatMap { $0 == user.email ? nil : $0 }
        if let newEmail, !UserRepository.isEmailAddress(newEmail) { errors["email", default: []].append(Phrase("errors.not_email")) }
        if let newEmail, errors["email"] == nil, try await accounts.signIn.users.storage.find(email: newEmail) != nil {
            errors["email", default: []].append(Phrase("errors.taken"))
        }
        // Some(nil): back to the browser's language.
        var locale: String??
        if let asked = changes.locale {
            let languages = accountPage.views.languages
            if asked.isEmpty {
                if user.locale != nil { locale = .some(nil) }
            } else if let language = languages.language(tag: asked) {
                if language.tag != user.locale { locale = .some(language.tag) }
            } else {
                errors["locale", default: []].append(Phrase("errors.not_a_language", ["languages": languages.all.map(\.tag).joined(separator: ", ")]))
            }
        }
        if let password = changes.password {
            let problems = PasswordRules.problems(password, email: user.email)
            if !problems.isEmpty { errors["password"] = problems }
        }
        // Asked for at all (even an address that is already the account's), a password or an address needs the
        // current password, as the schema says.
        if changes.password != nil || changes.email != nil {
            if !user.hasLocalPassword {
                let provider = try await accounts.signIn.providers.provider(of: identity)?.settings.displayName ?? "your provider"
                let held = Phrase("errors.held_by_provider", ["provider": provider])
                if changes.password != nil { errors["password", default: []].append(held) }
                if changes.email != nil { errors["email", default: []].append(held) }
            } else if errors.isEmpty, let wrong = try await accounts.checkPassword(changes.currentPassword, of: user, clientIP: clientIP) {
                errors.merge(wrong.errors) { $0 + $1 }
            }
        }
        guard errors.isEmpty, let id = user.id else { throw ValidationFailed(errors: errors) }

        var applied = Applied(nameChanged: name != nil, languageChanged: locale != nil)
        var writes = AccountWrites()
        var hash: String?
        if let password = changes.password {
            hash = try await accounts.signIn.users.passwords.hash(password)
            writes = writes + accounts.mail.passwordChanged(for: user)
            applied.passwordChanged = true
        }
        if let newEmail {
            writes = writes + accounts.mail.confirmation(for: user, address: newEmail, welcome: false) + accounts.mail.addressChanging(for: user, to: newEmail)
            applied.emailChangeMailed = true
        }
        try await accounts.storage.update(userId: id, name: name, passwordHash: hash, writes: writes, now: Date())
        if let locale { try await accounts.signIn.users.storage.setLocale(locale, userId: id) }
        if !writes.mails.isEmpty { accounts.outbox.nudge() }
        accounts.accountChanged(userId: id)
        // Kept lists and posts name their authors.
        if applied.nameChanged { posts.generation.bump() }
        if applied.passwordChanged { try await accounts.endSessions(of: id, except: identity.session?.id) }
        return applied
    }

    @Sendable func updateFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        _ = try await apply(try await request.decodeBody(as: Changes.self), identity: context.identity, clientIP: clientIP(request, context))
        let user = try await accounts.signIn.users.storage.find(id: context.identity.userId) ?? context.identity.user
        let provider = try await accounts.signIn.providers.provider(of: context.identity)?.name
        return .json(encoded: SessionsAPIController.Me(user, provider: provider).json)
    }

    // MARK: The account page's forms

    @Sendable func updateName(request: Request, context: SignedInContext) async throws -> Response {
        try await fromPage(request: request, context: context, form: .name) { fields in Changes(name: fields["name"] ?? "") }
    }

    @Sendable func updatePassword(request: Request, context: SignedInContext) async throws -> Response {
        try await fromPage(request: request, context: context, form: .password) { fields in
            Changes(password: fields["password"] ?? "", currentPassword: fields["current_password"])
        }
    }

    @Sendable func updateLanguage(request: Request, context: SignedInContext) async throws -> Response {
        try await fromPage(request: request, context: context, form: .language) { fields in Changes(locale: fields["locale"] ?? "") }
    }

    @Sendable func updateEmail(request: Request, context: SignedInContext) async throws -> Response {
        try await fromPage(request: request, context: context, form: .email) { fields in
            Changes(email: fields["email"] ?? "", currentPassword: fields["current_password"])
        }
    }

    private func fromPage(
        request: Request, context: SignedInContext, form: AccountController.Form, changes: ([String: String]) -> Changes
    ) async throws -> Response {
        var request = request
        let fields = try await request.formFields(limit: SessionsAPIController.maximumBodySize)
        let asked = changes(fields)
        do {
            let applied = try await apply(asked, identity: context.identity, clientIP: clientIP(request, context))
            let flash: Flash =
                applied.passwordChanged
                ? .passwordChanged : applied.emailChangeMailed ? .emailChangeMailed : form == .language ? .languageChanged : .nameChanged
            return Response.seeOther("/account").flashing(flash)
        } catch let invalid as ValidationFailed {
            let failed = AccountController.FailedForm(form: form, errors: invalid.errors, name: asked.name, email: asked.email)
            return try await accountPage.page(request: request, context: context, failed: failed, status: .unprocessableContent)
        } catch let throttled as SignInThrottle.Throttled {
            let failed = AccountController.FailedForm(
                form: form, errors: ["current_password": [Self.throttled(throttled)]], name: asked.name, email: asked.email
            )
            return try await accountPage.page(request: request, context: context, failed: failed, status: .tooManyRequests).retrying(after: throttled)
        }
    }

    private func clientIP(_ request: Request, _ context: SignedInContext) -> String? {
        request.clientIP(context: context, trustProxy: accounts.signIn.trustProxy)
    }

    /// Said under the password field: "was tried too often: try again in 15 minutes".
    static func throttled(_ throttled: SignInThrottle.Throttled) -> Phrase {
        Phrase("errors.tried_too_often", count: (throttled.retryAfter + 59) / 60)
    }

    // MARK: Deleting an account

    /// Returns when the caller proved they are the owner just now: their password (else `ValidationFailed`, or
    /// `Throttled` past the limit), or for a provider's account a sign-in within the last ten minutes (else a 403).
    private func proveOwnership(password: String?, identity: Identity, clientIP: String?) async throws {
        if identity.user.hasLocalPassword {
            if let wrong = try await accounts.checkPassword(password, of: identity.user, field: "password", clientIP: clientIP) { throw wrong }
            return
        }
        let tokenIssued = (identity.providerToken?.claims["iat"] as? NSNumber).map { Date(timeIntervalSince1970: $0.doubleValue) }
        let signedInAt = identity.session?.createdAt ?? tokenIssued ?? .distantPast
        guard Date().timeIntervalSince(signedInAt) <= Self.recentSignIn else {
            throw AppError(
                .forbidden, title: "Sign in again first",
                message: "To delete your account, sign in again (within the last 10 minutes), then delete it."
            )
        }
    }

    /// Everything of the person goes: sessions ended everywhere (streams get signed-out, websockets close 4401, a
    /// provider's tokens are revoked), devices unregistered at Unified Push, then the account's row and every row
    /// that hangs from it (posts, tokens, keys, offline copies) in one transaction with the last mail. Open pages drop
    /// the posts.
    func delete(identity: Identity, logger: Logger) async throws {
        let (user, id) = (identity.user, identity.userId)
        if let devices = accounts.devices {
            for device in try await devices.list(userId: id) { _ = try await devices.unregister(token: device.token, userId: id) }
        }
        try await accounts.endSessions(of: id, except: nil)
        let postIDs = try await accounts.storage.delete(userId: id, writes: accounts.mail.accountDeleted(for: user), now: Date())
        accounts.outbox.nudge()
        // A sign-in still cached (a session too idle to be listed) must not act for an account that is gone.
        accounts.accountChanged(userId: id)
        posts.withdrawn(postIDs: postIDs)
        logger.notice("account deleted", metadata: ["user": "\(id)", "posts": "\(postIDs.count)"])
    }

    @Sendable func deleteFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        // A provider's account has no password to send: the body may be empty.
        let password = try await request.decodeBody(as: PasswordBody.self, emptyAllowed: true).password
        try await proveOwnership(password: password, identity: context.identity, clientIP: clientIP(request, context))
        try await delete(identity: context.identity, logger: context.logger)
        return accounts.signIn.signingOut(Response(status: .noContent), request: request)
    }

    /// `account/delete`: what goes, and the button that makes it go.
    struct DeletionView: Sendable {
        let email: String
        /// "your 3 posts, which also leave every open page;", in the reader's language and its plural forms.
        let posts: String
        let sessions: String
        let devices: String
        let hasLocalPassword: Bool
        let password: FormField
    }

    @Sendable func showDeletion(request: Request, context: SignedInContext) async throws -> Response {
        try await deletionPage(request: request, context: context)
    }

    private func deletionPage(
        request: Request, context: SignedInContext, errors: [String: [Phrase]] = [:], status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let id = context.identity.userId
        let language = accountPage.views.language(for: request, context: context)
        let view = DeletionView(
            email: context.identity.user.email,
            posts: language.plural("account.delete.posts", count: try await accounts.storage.postCount(userId: id)),
            sessions: language.plural("account.delete.sessions", count: try await accounts.signIn.sessions.list(userId: id).count),
            devices: language.plural("account.delete.devices", count: try await accounts.devices?.list(userId: id).count ?? 0),
            hasLocalPassword: context.identity.user.hasLocalPassword, password: FormField("password", value: "", errors: errors, in: language)
        )
        return accountPage.views.page(
            "account/delete", ["title": Phrase("account.delete.title"), "form_page": true, "deletion": view], request: request, context: context,
            status: status
        )
    }

    @Sendable func deleteFromPage(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let password = try await request.formFields(limit: SessionsAPIController.maximumBodySize)["password"]
        do {
            try await proveOwnership(password: password, identity: context.identity, clientIP: clientIP(request, context))
        } catch let invalid as ValidationFailed {
            return try await deletionPage(request: request, context: context, errors: invalid.errors, status: .unprocessableContent)
        } catch let throttled as SignInThrottle.Throttled {
            let errors = ["password": [Self.throttled(throttled)]]
            return try await deletionPage(request: request, context: context, errors: errors, status: .tooManyRequests).retrying(after: throttled)
        }
        try await delete(identity: context.identity, logger: context.logger)
        return accounts.signIn.signingOut(Response.seeOther("/").flashing(.accountDeleted), request: request)
    }

    struct PasswordBody: FormOrJSONBody {
        static let expectedJSON = #"{"password": "…"}"#
        let password: String?
        init(fields: [String: String]) { password = fields["password"] }
    }

    // MARK: Your data

    /// One JSON document of everything Foyer holds about the person.
    struct Export: Encodable {
        struct Session: Encodable {
            let id: String
            let device: String
            let userAgent: String?
            let ipAddress: String?
            let createdAt: Date
            let lastSeenAt: Date
        }

        struct ExportedPost: Encodable {
            let id: Int64
            let title: String
            let content: String
            let createdAt: Date
            let updatedAt: Date
        }

        struct Device: Encodable {
            let deviceToken: String
            let platform: String
            let operatingSystem: String?
            let osVersion: String?
            let createdAt: Date
        }

        let exportedAt: Date
        let account: SessionsAPIController.Me
        let sessions: [Session]
        let posts: [ExportedPost]
        let devices: [Device]
    }

    @Sendable func export(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let id = identity.userId
        let user = try await accounts.signIn.users.storage.find(id: id) ?? identity.user
        let sessions = try await accounts.signIn.sessions.list(userId: id).map {
            Export.Session(
                id: $0.id, device: DeviceName.describe($0.userAgent), userAgent: $0.userAgent, ipAddress: $0.ipAddress, createdAt: $0.createdAt,
                lastSeenAt: $0.lastSeenAt
            )
        }
        let posts = try await accounts.storage.posts(userId: id).map {
            Export.ExportedPost(id: $0.id ?? 0, title: $0.title, content: $0.content, createdAt: $0.createdAt, updatedAt: $0.updatedAt)
        }
        let devices = try await accounts.devices?.list(userId: id).map {
            Export.Device(deviceToken: $0.token, platform: $0.platform.rawValue, operatingSystem: $0.operatingSystem, osVersion: $0.osVersion, createdAt: $0.createdAt)
        } ?? []
        let provider = try await accounts.signIn.providers.provider(of: identity)?.name
        var response = Response.json(Export(
            exportedAt: Date(), account: .init(user, provider: provider), sessions: sessions, posts: posts, devices: devices
        ))
        response.headers[.contentDisposition] = "attachment; filename=\"foyer-export-\(id).json\""
        response.headers[.cacheControl] = "no-store"
        return response
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension AccountSettingsController.DeletionView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "email": email
        case "posts": posts
        case "sessions": sessions
        case "devices": devices
        case "hasLocalPassword": hasLocalPassword
        case "password": password
        default: nil
        }
    }
}
