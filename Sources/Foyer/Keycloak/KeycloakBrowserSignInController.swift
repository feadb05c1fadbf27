import Crypto
import Foundation
import GRDB
import HTTPTypes
import Hummingbird

/// A browser sign-in under way: what the callback checks Keycloak's answer against. Kept server-side; the
/// browser holds only the state, in a cookie, so a callback can be finished only in the browser that started it.
struct KeycloakSignInAttempt: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "keycloak_sign_ins"
    static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase
    /// Long enough to type a password and fetch a one-time code from a phone.
    static let lifetime: TimeInterval = 600

    var state: String
    var codeVerifier: String
    var nonce: String
    var redirectUri: String
    var returnTo: String
    var createdAt: Date

    /// S256: the verifier never leaves Foyer until the code exchange, so a stolen code is useless to whoever stole it.
    var codeChallenge: String {
        Data(SHA256.hash(data: Data(codeVerifier.utf8))).base64URLEncoded
    }
}

/// "Sign in with Keycloak" for browsers and WebViews: authorization code flow with PKCE, `state` and `nonce`.
/// `GET /sign_in/keycloak` sends the browser to the realm's login page; Keycloak sends it back to
/// `GET /sign_in/keycloak/callback`, where the code becomes tokens (kept with a new Foyer session) and the browser
/// goes on, with the session cookie, to the page it first asked for.
struct KeycloakBrowserSignInController {
    static let callbackPath = "/sign_in/keycloak/callback"
    static let stateCookie = "foyer_keycloak_sign_in"

    let keycloak: KeycloakSessions
    let signIn: SignIn
    let views: Views

    func addRoutes(to router: FoyerRouter) {
        router.get("/sign_in/keycloak", use: start)
        router.get(RouterPath(stringLiteral: Self.callbackPath), use: finish)
    }

    @Sendable func start(request: Request, context: FoyerRequestContext) async throws -> Response {
        let returnTo = ReturnPath.safe(request.uri.queryParameters["return_to"].map(String.init), request: request)
        let attempt = KeycloakSignInAttempt(
            state: SessionRepository.randomToken(), codeVerifier: SessionRepository.randomToken(), nonce: SessionRepository.randomToken(),
            redirectUri: request.publicOrigin(trustProxy: signIn.trustProxy) + Self.callbackPath, returnTo: returnTo, createdAt: Date()
        )
        let endpoints = try await keycloak.client.endpoints()
        // Abandoned attempts go when new ones come.
        try await keycloak.storage.insert(attempt, droppingOlderThan: Date().addingTimeInterval(-KeycloakSignInAttempt.lifetime))
        let parameters = [
            "response_type": "code", "client_id": keycloak.client.settings.clientID, "redirect_uri": attempt.redirectUri,
            "scope": "openid email profile", "state": attempt.state, "nonce": attempt.nonce,
            "code_challenge": attempt.codeChallenge, "code_challenge_method": "S256",
        ]
        let authorize = endpoints.authorizationEndpoint
        var response = Response.seeOther(authorize + (authorize.contains("?") ? "&" : "?") + FormEncoding.encode(parameters))
        response.setCookie(stateCookie(attempt.state, request: request))
        return response
    }

    @Sendable func finish(request: Request, context: FoyerRequestContext) async throws -> Response {
        // Keycloak's redirect carries form encoding (RFC 6749 appendix B): a `+` is a space.
        let query = FormFields.parse(request.uri.query ?? "")
        guard let state = query["state"], !state.isEmpty,
            request.cookies[Self.stateCookie]?.value == state,
            let attempt = try await take(state)
        else {
            return failure(
                "This sign-in has expired, was already used, or was started in another browser. Sign in again.",
                status: .badRequest, request: request, context: context
            )
        }
        if let error = query["error"] {
            let detail = query["error_description"].map { ": \($0)" } ?? ""
            let message = error == "access_denied"
                ? "Keycloak did not sign you in (access denied\(detail))."
                : "Keycloak could not sign you in (\(error)\(detail))."
            return failure(message, status: error == "access_denied" ? .forbidden : .badRequest, returnTo: attempt.returnTo, request: request, context: context)
        }
        guard let code = query["code"], !code.isEmpty else {
            return failure("Keycloak sent no authorization code. Sign in again.", status: .badRequest, returnTo: attempt.returnTo, request: request, context: context)
        }

        let tokens: KeycloakTokenSet
        do {
            tokens = try await keycloak.client.authorizationCodeGrant(code: code, codeVerifier: attempt.codeVerifier, redirectURI: attempt.redirectUri)
        } catch KeycloakError.invalidGrant(let reason) {
            return failure(
                "Keycloak no longer accepts this sign-in (\(reason)); codes are short-lived and single-use. Sign in again.",
                status: .badRequest, returnTo: attempt.returnTo, request: request, context: context
            )
        }
        guard let idToken = tokens.idToken else {
            throw AppError(.badGateway, title: "Sign-in misconfigured", message: "Keycloak answered without an ID token: is the openid scope allowed for this client?")
        }
        do {
            _ = try await keycloak.verifier.verify(
                idToken, issuers: [try await keycloak.client.endpoints().issuer],
                use: .idToken(clientID: keycloak.client.settings.clientID, nonce: attempt.nonce)
            )
        } catch let rejected as TokenRejected {
            return failure("Keycloak's answer did not check out: \(rejected). Sign in again.", status: .badRequest, returnTo: attempt.returnTo, request: request, context: context)
        }

        let user = try await keycloak.user(signedInWith: tokens)
        let (_, token) = try await signIn.openSession(for: .init(user: user, keycloakTokens: tokens), request: request, context: context)
        var response = Response.seeOther(attempt.returnTo).flashing(.signedIn)
        response.setCookie(signIn.cookie(token: token, request: request))
        response.setCookie(stateCookie("", request: request, expired: true))
        return response
    }

    /// Single use: the attempt is gone once its callback came, whatever the outcome.
    private func take(_ state: String) async throws -> KeycloakSignInAttempt? {
        guard let attempt = try await keycloak.storage.take(state: state) else { return nil }
        return attempt.createdAt.timeIntervalSinceNow > -KeycloakSignInAttempt.lifetime ? attempt : nil
    }

    /// The sign-in page again, saying what went wrong, with the way to start over.
    private func failure(
        _ message: String, status: HTTPResponse.Status, returnTo: String? = nil, request: Request, context: FoyerRequestContext
    ) -> Response {
        var response = SignInForm(views: views, signIn: signIn).page(
            request: request, context: context, returnTo: returnTo, message: message, status: status
        )
        response.setCookie(stateCookie("", request: request, expired: true))
        return response
    }

    /// Lax: Keycloak's redirect back to us is a top-level GET from another site, and must carry it.
    private func stateCookie(_ value: String, request: Request, expired: Bool = false) -> Cookie {
        Cookie(
            name: Self.stateCookie, value: value, maxAge: expired ? 0 : Int(KeycloakSignInAttempt.lifetime), path: "/sign_in/keycloak",
            secure: signIn.cookiesAreSecure(for: request), httpOnly: true, sameSite: .lax
        )
    }
}
