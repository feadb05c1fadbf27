import Crypto
import Foundation
import GRDB
import HTTPTypes
import Hummingbird

/// A browser sign-in under way: what the callback checks the provider's answer against. Kept server-side; the
/// browser holds only the state, in a cookie, so a callback can be finished only in the browser that started it.
struct BrowserSignInAttempt: Codable, Sendable, FetchableRecord, PersistableRecord {
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
    var provider: String

    /// S256: the verifier never leaves Foyer until the code exchange, so a stolen code is useless to whoever stole it.
    var codeChallenge: String {
        Data(SHA256.hash(data: Data(codeVerifier.utf8))).base64URLEncoded
    }
}

/// "Sign in with …" for browsers and WebViews, one per provider: authorization code flow with PKCE, `state` and
/// `nonce`. `GET /sign_in/{provider}` sends the browser to the provider's login page; the provider sends it back to
/// `GET /sign_in/{provider}/callback`, where the code becomes tokens (kept with a new Foyer session) and the
/// browser goes on, with the session cookie, to the page it first asked for.
struct BrowserSignInController {
    let provider: ProviderSessions
    let signIn: SignIn
    let views: Views

    var callbackPath: String { provider.settings.signInPath + "/callback" }
    /// `foyer_keycloak_sign_in` for Keycloak, as before there were others.
    var stateCookieName: String { "foyer_\(provider.name.replacingOccurrences(of: "-", with: "_"))_sign_in" }

    func addRoutes(to router: FoyerRouter) {
        router.get(RouterPath(stringLiteral: provider.settings.signInPath), use: start)
        router.get(RouterPath(stringLiteral: callbackPath), use: finish)
    }

    @Sendable func start(request: Request, context: FoyerRequestContext) async throws -> Response {
        let returnTo = ReturnPath.safe(request.uri.queryParameters["return_to"].map(String.init), request: request)
        let attempt = BrowserSignInAttempt(
            state: SessionRepository.randomToken(), codeVerifier: SessionRepository.randomToken(), nonce: SessionRepository.randomToken(),
            redirectUri: request.publicOrigin(trustProxy: signIn.trustProxy) + callbackPath, returnTo: returnTo, createdAt: Date(),
            provider: provider.name
        )
        let endpoints = try await provider.client.endpoints()
        // Abandoned attempts go when new ones come.
        try await provider.storage.insert(attempt, droppingOlderThan: Date().addingTimeInterval(-BrowserSignInAttempt.lifetime))
        let parameters = [
            "response_type": "code", "client_id": provider.settings.clientID, "redirect_uri": attempt.redirectUri,
            "scope": provider.settings.scopes, "state": attempt.state, "nonce": attempt.nonce,
            "code_challenge": attempt.codeChallenge, "code_challenge_method": "S256",
        ]
        let authorize = endpoints.authorizationEndpoint
        var response = Response.seeOther(authorize + (authorize.contains("?") ? "&" : "?") + FormEncoding.encode(parameters))
        response.setCookie(stateCookie(attempt.state, request: request))
        return response
    }

    @Sendable func finish(request: Request, context: FoyerRequestContext) async throws -> Response {
        // The provider's redirect carries form encoding (RFC 6749 appendix B): a `+` is a space.
        let query = FormFields.parse(request.uri.query ?? "")
        guard let state = query["state"], !state.isEmpty,
            request.cookies[stateCookieName]?.value == state,
            let attempt = try await take(state)
        else {
            return failure(
                "This sign-in has expired, was already used, or was started in another browser. Sign in again.",
                status: .badRequest, request: request, context: context
            )
        }
        let displayName = provider.settings.displayName
        if let error = query["error"] {
            let detail = query["error_description"].map { ": \($0)" } ?? ""
            let message = error == "access_denied"
                ? "\(displayName) did not sign you in (access denied\(detail))."
                : "\(displayName) could not sign you in (\(error)\(detail))."
            return failure(message, status: error == "access_denied" ? .forbidden : .badRequest, returnTo: attempt.returnTo, request: request, context: context)
        }
        guard let code = query["code"], !code.isEmpty else {
            return failure("\(displayName) sent no authorization code. Sign in again.", status: .badRequest, returnTo: attempt.returnTo, request: request, context: context)
        }

        let tokens: ProviderTokenSet
        do {
            tokens = try await provider.client.authorizationCodeGrant(code: code, codeVerifier: attempt.codeVerifier, redirectURI: attempt.redirectUri)
        } catch let error as ProviderError where error.kind == .invalidGrant {
            return failure(
                "\(displayName) no longer accepts this sign-in (\(error.reason)); codes are short-lived and single-use. Sign in again.",
                status: .badRequest, returnTo: attempt.returnTo, request: request, context: context
            )
        }
        guard let idToken = tokens.idToken else {
            throw AppError(.badGateway, title: "Sign-in misconfigured", message: "\(displayName) answered without an ID token: is the openid scope allowed for this client?")
        }
        do {
            _ = try await provider.verifier.verify(
                idToken, issuers: [try await provider.client.endpoints().issuer],
                use: .idToken(clientID: provider.settings.clientID, nonce: attempt.nonce)
            )
        } catch let rejected as TokenRejected {
            return failure("\(displayName)'s answer did not check out: \(rejected). Sign in again.", status: .badRequest, returnTo: attempt.returnTo, request: request, context: context)
        }

        let user = try await provider.user(signedInWith: tokens)
        let (_, token, _) = try await signIn.openSession(for: .init(user: user, provider: provider, tokens: tokens), request: request, context: context)
        var response = Response.seeOther(attempt.returnTo).flashing(.signedIn)
        response.setCookie(signIn.cookie(token: token, request: request))
        response.setCookie(stateCookie("", request: request, expired: true))
        return response
    }

    /// Single use: the attempt is gone once its callback came, whatever the outcome.
    private func take(_ state: String) async throws -> BrowserSignInAttempt? {
        guard let attempt = try await provider.storage.take(state: state), attempt.provider == provider.name else { return nil }
        return attempt.createdAt.timeIntervalSinceNow > -BrowserSignInAttempt.lifetime ? attempt : nil
    }

    /// The sign-in page again, saying what went wrong, with the way to start over.
    private func failure(
        _ message: String, status: HTTPResponse.Status, returnTo: String? = nil, request: Request, context: FoyerRequestContext
    ) -> Response {
        var response = SignInForm(views: views, signIn: signIn).page(
            request: request, context: context, returnTo: returnTo, message: Phrase(verbatim: message), status: status
        )
        response.setCookie(stateCookie("", request: request, expired: true))
        return response
    }

    /// Lax: the provider's redirect back to us is a top-level GET from another site, and must carry it.
    private func stateCookie(_ value: String, request: Request, expired: Bool = false) -> Cookie {
        Cookie(
            name: stateCookieName, value: value, maxAge: expired ? 0 : Int(BrowserSignInAttempt.lifetime), path: provider.settings.signInPath,
            secure: signIn.cookiesAreSecure(for: request), httpOnly: true, sameSite: .lax
        )
    }
}
