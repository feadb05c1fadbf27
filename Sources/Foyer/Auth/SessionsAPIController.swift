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

    static let noFoyerSession = AppError(
        .notFound, title: "No Foyer session",
        message: "This request carries a Keycloak access token, not a Foyer session: there is no Foyer session to end. Sign out at Keycloak."
    )

    struct SessionJSON: Encodable {
        let id: String
        let user: User.Public
        let userAgent: String?
        let ipAddress: String?
        let createdAt: Date
        let lastSeenAt: Date
        let current: Bool

        init(_ session: AuthSession, user: User, current: Bool) {
            self.id = session.id
            self.user = user.publicView
            self.userAgent = session.userAgent
            self.ipAddress = session.ipAddress
            self.createdAt = session.createdAt
            self.lastSeenAt = session.lastSeenAt
            self.current = current
        }

        private enum CodingKeys: String, CodingKey {
            case id, user, userAgent, ipAddress, createdAt, lastSeenAt, current
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
        }
    }

    @Sendable func create(request: Request, context: FoyerRequestContext) async throws -> Response {
        let credentials = try await Credentials.read(from: request)
        guard let verified = try await signIn.verify(login: credentials.email, password: credentials.password, request: request, context: context) else {
            var response = Response.json(["error": SignIn.wrongCredentials], status: .unauthorized)
            response.headers[.wwwAuthenticate] = "Bearer"
            return response
        }
        let (session, token) = try await signIn.openSession(for: verified, request: request, context: context)
        var response = Response.json(SessionJSON(session, user: verified.user, current: true), status: .created)
        response.headers[.xSessionToken] = token
        response.headers[.cacheControl] = "no-store"
        response.setCookie(signIn.cookie(token: token, request: request))
        return response
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
        guard let id = requested == "current" ? identity.session?.id : requested else { throw Self.noFoyerSession }
        guard try await signIn.revoke(session: id, userId: identity.userId) else {
            throw AppError(.notFound, message: "You have no active session with id \(requested)")
        }
        var response = Response(status: .noContent)
        if id == identity.session?.id {
            response.setCookie(signIn.expiredCookie(request: request))
        }
        return response
    }

    @Sendable func me(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        struct Me: Encodable {
            let id: Int64
            let email: String
            let createdAt: Date
        }
        return .json(Me(id: identity.userId, email: identity.user.email, createdAt: identity.user.createdAt))
    }

    /// A native app that signed in through the API loads this in its WebView with its Bearer token, so the
    /// WebView gets the session cookie too (and lands on `return_to`, when given, instead of a 204).
    @Sendable func cookie(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        var token = identity.token
        if identity.session == nil, let presented = identity.keycloakToken {
            // An app signed in with AppAuth: its WebView gets a Foyer session relaying that access token until it
            // expires; then the WebView's 401 makes the app hand over a fresh one.
            let tokens = KeycloakTokenSet(
                accessToken: presented.raw, expiresIn: Int(presented.expiresAt.timeIntervalSinceNow), refreshToken: nil, idToken: nil
            )
            token = try await signIn.openSession(for: .init(user: identity.user, keycloakTokens: tokens), request: request, context: context).token
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
/// or as a urlencoded form.
struct Credentials {
    let email: String
    let password: String

    private struct Body: Decodable {
        var email: String?
        var username: String?
        var password: String?
        var session: Nested?
        var user: Nested?

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
        var email: String?, password: String?
        let looksLikeJSON = request.isJSONBody || (!request.isFormEncoded && text.first(where: { !$0.isWhitespace }) == "{")
        if looksLikeJSON {
            let body: Body
            do {
                body = try JSONDecoder().decode(Body.self, from: Data(buffer: buffer))
            } catch {
                throw AppError(.badRequest, message: "The body is not valid JSON: expected {\"email\": \"…\", \"password\": \"…\"}")
            }
            let nested = body.session ?? body.user
            email = body.email ?? body.username ?? nested?.email ?? nested?.username
            password = body.password ?? nested?.password
        } else {
            let fields = FormFields.parse(text)
            email = fields["email"] ?? fields["username"] ?? fields["session[email]"] ?? fields["user[email]"]
            password = fields["password"] ?? fields["session[password]"] ?? fields["user[password]"]
        }
        let missing = [("email", email), ("password", password)].filter { $0.1?.isEmpty ?? true }.map(\.0)
        guard missing.isEmpty, let email, let password else {
            throw AppError(.unprocessableContent, message: "Missing \(missing.joined(separator: " and ")): send email and password")
        }
        return Credentials(email: email, password: password)
    }
}
