import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// `/account`: who is signed in, and every device signed in as them, each revocable.
struct AccountController {
    let signIn: SignIn
    let views: Views
    let storage: any AccountStorage
    /// Claims that are times, shown as times.
    static let timeClaims: Set<String> = ["exp", "iat", "nbf", "auth_time", "updated_at"]

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.get("/account", use: show)
        signedIn.delete("/account/sessions/{id}", use: revokeSession)
        signedIn.delete("/account/other_sessions", use: revokeOtherSessions)
    }

    /// `account/show`: who you are, and each device signed in as you, the current one first.
    struct AccountView: Sendable {
        struct Device: Sendable {
            let id: String
            /// "Chrome on macOS"; the raw user agent is its title.
            let name: String
            let userAgent: String
            let ipAddress: String
            let signedIn: TimeView
            let lastSeen: TimeView
            let current: Bool
            /// Its token works only with a DPoP proof from the app's key.
            let boundToDeviceKey: Bool
        }

        /// What the provider this sign-in came from says about you.
        struct Provider: Sendable {
            /// `keycloak-claims`, `acme-sso-claims`.
            let id: String
            let displayName: String
            let claims: [[String: String]]
            let ownToken: Bool
        }

        let email: String
        let devices: [Device]
        let hasOtherDevices: Bool
        let provider: Provider?
        let settings: Settings
        /// A moderator or admin: the page links the queue.
        let moderates: Bool
        let passkeys: [PasskeyView]
        /// Signed in within the last 10 minutes: a passkey may be added (else the page says to sign in again).
        let mayAddPasskey: Bool
        let language: LanguageChoice
    }

    /// The language form: each language by its own name, and whether the account chose one.
    struct LanguageChoice: Sendable {
        struct Option: Sendable {
            let tag: String
            let name: String
            let selected: Bool
        }

        let options: [Option]
        let chosen: Bool

        init(languages: Languages, chosen tag: String?) {
            let chosen = tag.flatMap(languages.language(tag:))
            options = languages.all.map { Option(tag: $0.tag, name: $0.text("language.name"), selected: $0 === chosen) }
            self.chosen = chosen != nil
        }
    }

    /// One passkey on the account page.
    struct PasskeyView: Sendable {
        /// The credential id, base64url: its forms' address.
        let id: String
        let name: String
        let created: TimeView
        let lastUsed: TimeView?
        let synced: Bool
    }

    /// The account's own settings: each form with its fields and what is wrong with them.
    struct Settings: Sendable {
        let name: FormField
        let emailConfirmed: Bool
        /// A local account: its password and address are changed here (a provider's are changed there).
        let hasLocalPassword: Bool
        let newEmail: FormField
        /// The address the account is moving to, while its confirmation link is live.
        let pendingEmail: String?
        let emailCurrentPassword: FormField
        let currentPassword: FormField
        let newPassword: FormField
    }

    /// The forms of the account page.
    enum Form: String, Sendable {
        case name, password, email, language
    }

    /// A form sent back with what is wrong with it, and what was typed (passwords are never shown again).
    struct FailedForm: Sendable {
        let form: Form
        let errors: [String: [Phrase]]
        let name: String?
        let email: String?
    }

    @Sendable func show(request: Request, context: SignedInContext) async throws -> Response {
        try await page(request: request, context: context)
    }

    func page(request: Request, context: SignedInContext, failed: FailedForm? = nil, status: HTTPResponse.Status = .ok) async throws -> Response {
        let identity = context.identity
        let time = views.readerTime(request, context: context)
        let sessions = try await signIn.sessions.list(userId: identity.userId)
        let devices = sessions.map { session in
            AccountView.Device(
                id: session.id, name: DeviceName.describe(session.userAgent), userAgent: session.userAgent ?? "",
                ipAddress: session.ipAddress ?? "unknown", signedIn: time.view(of: session.createdAt), lastSeen: time.view(of: session.lastSeenAt),
                current: session.id == identity.session?.id, boundToDeviceKey: session.isBoundToDeviceKey
            )
        }
        let provider = try await signIn.providers.claims(of: identity).map { provider, claims in
            AccountView.Provider(
                id: "\(provider.name)-claims", displayName: provider.displayName, claims: Self.readable(claims), ownToken: identity.providerToken != nil
            )
        }
        let user = identity.user
        func errors(_ form: Form) -> [String: [Phrase]] { failed?.form == form ? failed?.errors ?? [:] : [:] }
        let language = views.language(for: request, context: context)
        let settings = Settings(
            name: FormField("name", value: failed?.name ?? user.name, errors: errors(.name), in: language), emailConfirmed: user.emailConfirmedAt != nil,
            hasLocalPassword: user.hasLocalPassword, newEmail: FormField("email", value: failed?.email ?? "", errors: errors(.email), in: language),
            pendingEmail: try await storage.pendingEmail(userId: identity.userId, current: user.email, now: Date()),
            emailCurrentPassword: FormField("current_password", value: "", errors: errors(.email), in: language),
            currentPassword: FormField("current_password", value: "", errors: errors(.password), in: language),
            newPassword: FormField("password", value: "", errors: errors(.password), in: language)
        )
        let passkeys = try await signIn.passkeys.list(of: user).map { passkey in
            PasskeyView(
                id: passkey.id, name: passkey.name, created: time.view(of: passkey.createdAt), lastUsed: passkey.lastUsedAt.map(time.view(of:)),
                synced: passkey.backedUp
            )
        }
        let account = AccountView(
            email: user.email, devices: devices.filter(\.current) + devices.filter { !$0.current },
            hasOtherDevices: devices.contains { !$0.current }, provider: provider, settings: settings, moderates: user.moderates,
            passkeys: passkeys, mayAddPasskey: (try? Passkeys.requireRecentSignIn(identity)) != nil,
            language: LanguageChoice(languages: views.languages, chosen: user.locale)
        )
        return views.page("account/show", ["title": Phrase("account.title"), "account": account], request: request, context: context, status: status)
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
            throw AppError(.notFound, message: Phrase("sessions.errors.no_session"))
        }
        guard id == identity.session?.id else { return Response.seeOther("/account").flashing(.sessionRevoked) }
        var response = Response.seeOther("/").flashing(.signedOut)
        response.setCookie(signIn.expiredCookie(request: request))
        return response
    }

    /// "Sign out everywhere else": every session of yours but this one.
    @Sendable func revokeOtherSessions(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        for session in try await signIn.sessions.list(userId: identity.userId) where session.id != identity.session?.id {
            _ = try await signIn.revoke(session: session.id, userId: identity.userId)
        }
        return Response.seeOther("/account").flashing(.otherSessionsSignedOut)
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension AccountController.AccountView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "email": email
        case "devices": devices
        case "hasOtherDevices": hasOtherDevices
        case "provider": provider
        case "settings": settings
        case "moderates": moderates
        case "passkeys": passkeys
        case "mayAddPasskey": mayAddPasskey
        case "language": language
        default: nil
        }
    }
}

extension AccountController.AccountView.Device: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "name": self.name
        case "userAgent": userAgent
        case "ipAddress": ipAddress
        case "signedIn": signedIn
        case "lastSeen": lastSeen
        case "current": current
        case "boundToDeviceKey": boundToDeviceKey
        default: nil
        }
    }
}

extension AccountController.AccountView.Provider: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "displayName": displayName
        case "claims": claims
        case "ownToken": ownToken
        default: nil
        }
    }
}

extension AccountController.LanguageChoice: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "options": options
        case "chosen": chosen
        default: nil
        }
    }
}

extension AccountController.LanguageChoice.Option: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "tag": tag
        case "name": self.name
        case "selected": selected
        default: nil
        }
    }
}

extension AccountController.PasskeyView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "name": self.name
        case "created": created
        case "lastUsed": lastUsed
        case "synced": synced
        default: nil
        }
    }
}

extension AccountController.Settings: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "name": self.name
        case "emailConfirmed": emailConfirmed
        case "hasLocalPassword": hasLocalPassword
        case "newEmail": newEmail
        case "pendingEmail": pendingEmail
        case "emailCurrentPassword": emailCurrentPassword
        case "currentPassword": currentPassword
        case "newPassword": newPassword
        default: nil
        }
    }
}
