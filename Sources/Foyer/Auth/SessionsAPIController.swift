import Foundation
import HTTPTypes
import Hummingbird

/// Native sign-in: `POST /api/v1/sessions` answers with `X-Session-Token` for native code and a cookie for
/// the WebView, so both share one session. Also lists and revokes sessions, and hands a token over to a cookie.
struct SessionsAPIController {
    static let maximumBodySize = 64 * 1024
    let signIn: SignIn

    func addRoutes(to router: FoyerRouter) {
        router.post("/api/v1/sessions", use: create)
        router.post("/api/v1/sessions.json", use: create)
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.get("/api/v1/sessions", use: list)
        signedIn.get("/api/v1/sessions.json", use: list)
        signedIn.delete("/api/v1/sessions/{id}", use: revoke)
        signedIn.get("/api/v1/me", use: me)
        signedIn.get("/api/v1/session/cookie", use: cookie)
    }

    static func noFoyerSession(_ provider: String) -> AppError {
        AppError(
            .notFound, title: "No Foyer session",
            message: "This request carries a \(provider) access token, not a Foyer session: there is no Foyer session to end. Sign out at \(provider)."
        )
    }

    struct SessionJSON: Encodable {
        let id: String
        let user: User.Own
        let userAgent: String?
        let ipAddress: String?
        let createdAt: Date
        let lastSeenAt: Date
        let current: Bool
        /// `DPoP` for a session bound to the app's key (its token goes as `Authorization: DPoP`), else `Bearer`.
        let tokenType: String

        init(_ session: AuthSession, user: User, current: Bool) {
            self.id = session.id
            self.user = user.ownView
            self.userAgent = session.userAgent
            self.ipAddress = session.ipAddress
            self.createdAt = session.createdAt
            self.lastSeenAt = session.lastSeenAt
            self.current = current
            self.tokenType = session.isBoundToDeviceKey ? "DPoP" : "Bearer"
        }

        private enum CodingKeys: String, CodingKey {
            case id, user, userAgent, ipAddress, createdAt, lastSeenAt, current, tokenType
        }

        /// Unknown values are `null`, not missing: clients read every documented key.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(user, forKey: .user)
            try container.encode(userAgent, forKey: .userAgent)
            try container.encode(ipAddress, forKey: .ipAddress)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(lastSeenAt, forKey: .lastSeenAt)
            try container.encode(current, forKey: .current)
            try container.encode(tokenType, forKey: .tokenType)
        }
    }

    /// A password (`email`/`username` and `password`, checked by whoever holds the accounts, or by the provider the
    /// body names), or a native app's ID token (`{"provider", "id_token", "nonce"}`): `201` with the session either way.
    /// With a `DPoP` proof (RFC 9449) the session is bound to the app's key: its token then works only as
    /// `Authorization: DPoP` with a proof, and the WebView's cookie holds a token of its own.
    @Sendable func create(request: Request, context: FoyerRequestContext) async throws -> Response {
        let credentials = try await Credentials.read(from: request)
        // Before the credentials: a bad proof must not spend an ID token. Refused, it is a 401 with the DPoP challenge (RFC
        // 9449 §5 has a token endpoint answer 400, as OAuth's do; here every refused credential is a 401).
        let proof = try await signIn.signInProof(of: request)
        var provider: ProviderSessions?
        if let name = credentials.provider {
            guard let named = signIn.providers.named(name) else { return Self.refusal(unknownProvider(name)) }
            provider = named
        }
        let verified: SignIn.Verified
        switch credentials.proof {
        case .idToken(let idToken, let nonce):
            guard let provider else { throw AppError(.unprocessableContent, message: "Name the provider that issued the ID token: {\"provider\": \"…\", \"id_token\": \"…\"}") }
            do {
                verified = try await signIn.verify(idToken: idToken, nonce: nonce, provider: provider, request: request, context: context)
            } catch let rejected as TokenRejected {
                return Self.refusal(rejected.description)
            }
        case .passkey(let assertion):
            do {
                verified = try await signIn.verify(passkey: assertion, request: request, context: context)
            } catch let refusal as WebAuthnRefusal {
                return Self.refusal("The passkey was refused: \(refusal.description)")
            }
        case .password(let login, let password):
            if let provider, !(try await provider.client.endpoints().allowsPasswordGrant), provider !== signIn.providers.passwordChecker {
                throw AppError(
                    .unprocessableContent,
                    message: "\(provider.settings.displayName) does not allow signing in with a password here (its discovery lists no password grant): sign in at \(provider.settings.signInPath), or send its ID token"
                )
            }
            guard let found = try await signIn.verify(login: login, password: password, provider: provider, request: request, context: context) else {
                var response = Response.json(["error": SignIn.wrongCredentials], status: .unauthorized)
                response.headers[.wwwAuthenticate] = "Bearer"
                return response
            }
            verified = found
        }
        return try await Self.signedIn(verified, signIn: signIn, proof: proof, request: request, context: context)
    }

    /// A new session's answer, for a sign-in and a sign-up alike: `201` with the session, `X-Session-Token` for native
    /// code and the cookie for the WebView.
    static func signedIn(
        _ verified: SignIn.Verified, signIn: SignIn, proof: DPoPProof?, request: Request, context: FoyerRequestContext
    ) async throws -> Response {
        let (session, token, cookieToken) = try await signIn.openSession(for: verified, request: request, context: context, proof: proof)
        var response = Response.json(SessionJSON(session, user: verified.user, current: true), status: .created)
        response.headers[.xSessionToken] = token
        response.headers[.cacheControl] = "no-store"
        response.setCookie(signIn.cookie(token: cookieToken, request: request))
        return response
    }

    /// A credential that does not check out: `401` `invalid_token` (RFC 6750), saying why.
    static func refusal(_ reason: String) -> Response {
        var response = Response.json(["error": "invalid_token", "error_description": reason], status: .unauthorized)
        response.headers[.wwwAuthenticate] = ErrorMiddleware.invalidBearerToken(reason)
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// Which providers there are is the deployment's business, not the API's schema: an unknown one is a refused
    /// credential, like an unknown account.
    private func unknownProvider(_ name: String) -> String {
        let known = signIn.providers.all.map(\.name)
        return known.isEmpty ? "Foyer signs in with no provider named \(name): it has local accounts only"
            : "Foyer signs in with no provider named \(name); it knows \(known.joined(separator: ", "))"
    }

    @Sendable func list(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let sessions = try await signIn.sessions.list(userId: identity.userId)
        return .json(sessions.map { SessionJSON($0, user: identity.user, current: $0.id == identity.session?.id) })
    }

    /// `current` names the session making the request; any other id must be one of the user's own sessions.
    @Sendable func revoke(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let requested = try context.parameters.require("id")
        guard let id = requested == "current" ? identity.session?.id : requested else {
            throw Self.noFoyerSession(try await signIn.providers.provider(of: identity)?.settings.displayName ?? "your provider")
        }
        guard try await signIn.revoke(session: id, userId: identity.userId) else {
            throw AppError(.notFound, message: Phrase("sessions.errors.no_session"))
        }
        let response = Response(status: .noContent)
        return id == identity.session?.id ? signIn.signingOut(response, request: request) : response
    }

    @Sendable func me(request: Request, context: SignedInContext) async throws -> Response {
        let provider = try await signIn.providers.provider(of: context.identity)?.name
        return .json(encoded: Me(context.identity.user, provider: provider).json)
    }

    /// You, as only you see yourself: the address and whether it is confirmed. Its keys are the API's names
    /// already: converting each to snake case on every answer was a fifth of encoding it.
    struct Me: SnakeCaseKeyed {
        let id: Int64
        let name: String
        let email: String
        let emailConfirmed: Bool
        let createdAt: Date
        /// The provider this sign-in came from (`ProviderSettings.name`); null for a local account's password.
        let provider: String?
        /// `moderator`, `admin`, or null.
        let role: User.Role?
        /// When the terms were last accepted (null: never); `GET /terms` says whether that covers the version in force.
        let termsAcceptedAt: Date?
        /// The language chosen for the account (`pt-BR`); null: the browser's `Accept-Language` decides.
        let locale: String?

        init(_ user: User, provider: String?) {
            (id, name, email, emailConfirmed) = (user.id ?? 0, user.name, user.email, user.emailConfirmedAt != nil)
            (createdAt, self.provider, role, termsAcceptedAt, locale) = (user.createdAt, provider, user.role, user.termsAcceptedAt, user.locale)
        }

        enum CodingKeys: String, CodingKey {
            case id, name, email, provider, role, locale
            case emailConfirmed = "email_confirmed", createdAt = "created_at", termsAcceptedAt = "terms_accepted_at"
        }

        /// What the API's encoder writes of it (an account's export nests it so), written by hand: `GET
        /// /api/v1/me` is asked of every app at every launch, and `JSONEncoder` was a tenth of answering it.
        var json: ByteBuffer {
            var object = JSONObjectText()
            object.add("created_at", createdAt)
            object.add("email", email)
            object.add("email_confirmed", emailConfirmed)
            object.add("id", id)
            object.add("locale", locale)
            object.add("name", name)
            object.add("provider", provider)
            object.add("role", role?.rawValue)
            object.add("terms_accepted_at", termsAcceptedAt)
            return object.finished()
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(name, forKey: .name)
            try container.encode(email, forKey: .email)
            try container.encode(emailConfirmed, forKey: .emailConfirmed)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(provider, forKey: .provider)
            try container.encode(role, forKey: .role)
            try container.encode(termsAcceptedAt, forKey: .termsAcceptedAt)
            try container.encode(locale, forKey: .locale)
        }
    }

    /// A native app that signed in through the API loads this in its WebView with its Bearer token, so the
    /// WebView gets the session cookie too (and lands on `return_to`, when given, instead of a 204).
    /// A session bound to the app's key gets a new cookie token each time: its WebView never holds the app's own.
    @Sendable func cookie(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        var token = identity.token
        if let session = identity.session, session.isBoundToDeviceKey {
            token = try await signIn.sessions.renewCookieToken(of: session)
        } else if identity.session == nil, let presented = identity.providerToken, let provider = signIn.providers.named(presented.provider) {
            // An app signed in with AppAuth: its WebView gets a Foyer session relaying that access token until it
            // expires; then the WebView's 401 makes the app hand over a fresh one.
            let tokens = ProviderTokenSet(
                accessToken: presented.raw, expiresIn: Int(presented.expiresAt.timeIntervalSinceNow), refreshToken: nil, idToken: nil
            )
            token = try await signIn.openSession(for: .init(user: identity.user, provider: provider, tokens: tokens), request: request, context: context).token
        }
        var response: Response
        if let returnTo = request.uri.queryParameters["return_to"].map(String.init) {
            response = .seeOther(ReturnPath.safe(returnTo, request: request))
        } else {
            response = Response(status: .noContent)
        }
        response.setCookie(signIn.cookie(token: token, request: request))
        response.headers[.cacheControl] = "no-store"
        return response
    }
}

/// `email` (or `username`) and `password`, as JSON — flat or nested under `session`/`user`, as Rails clients send —
/// or as a urlencoded form; or a native app's `id_token` (and `nonce`). `provider` names who checks either.
struct Credentials {
    enum Proof {
        case password(login: String, password: String)
        case idToken(String, nonce: String?)
        /// A passkey's assertion, as the browser's `PublicKeyCredential.toJSON()` gives it.
        case passkey(AuthenticationResponseJSON)
    }

    let provider: String?
    let proof: Proof

    private struct Body: Decodable {
        var email: String?
        var username: String?
        var password: String?
        var provider: String?
        var idToken: String?
        var nonce: String?
        var session: Nested?
        var user: Nested?
        var passkey: AuthenticationResponseJSON?

        enum CodingKeys: String, CodingKey {
            case email, username, password, provider, nonce, session, user, passkey, idToken = "id_token"
        }

        struct Nested: Decodable {
            var email: String?
            var username: String?
            var password: String?
        }
    }

    static func read(from request: Request) async throws -> Credentials {
        var request = request
        let buffer = try await request.collectBody(limitedTo: SessionsAPIController.maximumBodySize)
        let text = String(buffer: buffer)
        var email: String?, password: String?, provider: String?, idToken: String?, nonce: String?, passkey: AuthenticationResponseJSON?
        let looksLikeJSON = request.isJSONBody || (!request.isFormEncoded && text.first(where: { !$0.isWhitespace }) == "{")
        if looksLikeJSON {
            let body: Body
            do {
                body = try JSONDecoder().decode(Body.self, from: Data(buffer: buffer))
            } catch {
                throw AppError(
                    .badRequest,
                    message: "The body is not valid JSON: expected {\"email\": \"…\", \"password\": \"…\"} or {\"passkey\": <the credential's toJSON()>}"
                )
            }
            let nested = body.session ?? body.user
            email = body.email ?? body.username ?? nested?.email ?? nested?.username
            password = body.password ?? nested?.password
            (provider, idToken, nonce, passkey) = (body.provider, body.idToken, body.nonce, body.passkey)
        } else {
            let fields = FormFields.parse(text)
            email = fields["email"] ?? fields["username"] ?? fields["session[email]"] ?? fields["user[email]"]
            password = fields["password"] ?? fields["session[password]"] ?? fields["user[password]"]
            (provider, idToken, nonce) = (fields["provider"], fields["id_token"], fields["nonce"])
        }
        provider = provider.flatMap { $0.isEmpty ? nil : $0 }
        if let passkey { return Credentials(provider: nil, proof: .passkey(passkey)) }
        if let idToken {
            guard !idToken.isEmpty else { throw AppError(.unprocessableContent, message: Phrase("sessions.errors.empty_id_token")) }
            return Credentials(provider: provider, proof: .idToken(idToken, nonce: nonce.flatMap { $0.isEmpty ? nil : $0 }))
        }
        let missing = [("email", email), ("password", password)].filter { $0.1?.isEmpty ?? true }.map(\.0)
        guard missing.isEmpty, let email, let password else {
            throw AppError(.unprocessableContent, message: Phrase("sessions.errors.missing", ["fields": missing.joined(separator: ", ")]))
        }
        return Credentials(provider: provider, proof: .password(login: email, password: password))
    }
}
