import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird
import Logging

/// Turns every error into an accurate status with a body in the client's format: an HTML page that loads Turbo,
/// or `{"error": "..."}`. Unauthenticated HTML gets the sign-in page with 401 (never a redirect: a native
/// shell shows its own sign-in on a 401).
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let views: Views
    let signInForm: SignInForm

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            return response(for: error, request: request, context: context)
        }
    }

    func response(for error: any Error, request: Request, context: Context) -> Response {
        var response = answer(to: error, request: request, context: context)
        // The rest of a body too large to read is not read: the connection closes after the answer.
        if response.status == .contentTooLarge { response.headers[.connection] = "close" }
        if let refusal = error as? IdempotencyRefusal { response.headers.append(contentsOf: refusal.headers) }
        return response
    }

    private func answer(to error: any Error, request: Request, context: Context) -> Response {
        // A session bound to the app's key, or a proof, that did not check out (RFC 9449 §7.1): native code asking.
        if let refused = error as? DPoPRefusal {
            var response = request.wantsJSON
                ? Response.json(["error": refused.code.rawValue, "error_description": refused.description], status: .unauthorized)
                : signInForm.page(request: request, context: context, returnTo: nil, message: Phrase(verbatim: refused.description), status: .unauthorized)
            response.headers[.wwwAuthenticate] = refused.challenge
            response.headers[.cacheControl] = "no-store"
            return response
        }
        // The upstream no longer takes our credentials: to the client that is "sign in again", like no session.
        if error is AuthenticationRequired || (error as? GraphQLUpstreamError)?.isSessionExpired == true {
            let invalidToken = (error as? AuthenticationRequired)?.invalidToken
            if request.wantsJSON {
                let message = invalidToken ?? "Sign in first: send Authorization: Bearer <token> or the session cookie"
                var response = Response.json(["error": message], status: .unauthorized)
                // RFC 6750 §3: say the token itself was the problem, so a client refreshes it instead of asking again.
                response.headers[.wwwAuthenticate] = invalidToken.map(Self.invalidBearerToken) ?? "Bearer"
                // A token sent as DPoP that names no live session: the challenge is in the scheme it came in.
                if let authorization = request.headers.value(.authorization), AuthenticationMiddleware.credential(fromAuthorization: authorization)?.1 == .dpop {
                    response.headers[.wwwAuthenticate] = DPoPRefusal.token(invalidToken ?? "No live session has this token: sign in again").challenge
                }
                return response
            }
            let returnTo = request.method == .get ? request.pathAndQuery : nil
            return signInForm.page(request: request, context: context, returnTo: returnTo, message: Phrase("sessions.sign_in_to_continue"), status: .unauthorized)
        }
        if let tooFast = error as? PostingTooFast {
            let language = views.language(for: request, context: context)
            let message = language.say(PostingTooFast.message)
            let response = request.wantsJSON
                ? Response.json(["error": message], status: .tooManyRequests)
                : views.page(
                    "errors/show", ["title": Phrase("posting.slow_down"), "status": 429, "message": message], request: request, context: context,
                    status: .tooManyRequests
                )
            return response.retrying(at: tooFast.retryAfter)
        }
        if error is AccountSuspended {
            guard request.wantsJSON else {
                return signInForm.page(request: request, context: context, returnTo: nil, message: AccountSuspended.message, status: .forbidden)
            }
            let language = views.language(for: request, context: context)
            return Response.json(["error": "account_suspended", "error_description": language.say(AccountSuspended.message)], status: .forbidden)
        }
        if let throttled = error as? SignInThrottle.Throttled {
            guard request.wantsJSON else { return signInForm.page(request: request, context: context, returnTo: nil, throttled: throttled) }
            return Response.json(["error": throttled.message], status: .tooManyRequests).retrying(after: throttled)
        }
        if let refused = error as? TermsNotAccepted {
            if request.wantsJSON {
                struct Body: Encodable {
                    let error = "terms_not_accepted"
                    let message: String
                    let termsURL = Terms.path
                    let termsVersion: String
                }
                let language = views.language(for: request, context: context)
                return Response.json(Body(message: language.say(TermsNotAccepted.message), termsVersion: refused.terms.version), status: .forbidden)
            }
            let view = TermsController.TermsView(
                refused.terms, identity: refused.identity, returnTo: request.method == .get ? request.pathAndQuery : nil, refusedWrite: true
            )
            var signedIn = context
            signedIn.identity = refused.identity
            return views.page("terms/show", ["title": Phrase("accept_terms.title"), "terms": view], request: request, context: signedIn, status: .forbidden)
        }
        if let invalid = error as? ValidationFailed {
            // The fields keep their names in every language; the messages are in the reader's.
            let language = views.language(for: request, context: context)
            guard request.wantsJSON else {
                return views.page(
                    "errors/show", ["title": invalid.status.reasonPhrase, "status": invalid.status.code, "message": invalid.fullMessages(in: language).joined(separator: " ")],
                    request: request, context: context, status: invalid.status
                )
            }
            struct Body: Encodable {
                let error: String
                let errors: [String: [String]]
            }
            let body = Body(error: invalid.fullMessages(in: language).joined(separator: "; "), errors: invalid.messages(in: language))
            var response = Response.json(body, status: invalid.status)
            response.headers[.contentLanguage] = language.tag
            return response
        }
        let (status, title, message) = Self.describe(error, in: views.language(for: request, context: context))
        // 501 is a feature this server was not configured for: the answer says so, the log need not.
        if status.code >= 500, status != .notImplemented {
            context.logger.error("request failed: \(String(reflecting: error))")
        }
        if request.wantsJSON {
            return Response.json(["error": message], status: status)
        }
        return views.page(
            "errors/show",
            ["title": title, "status": status.code, "message": message],
            request: request, context: context, status: status
        )
    }

    /// A header's quoted-string cannot hold quotes or backslashes.
    /// RFC 6750 §3: the token itself was the problem, and why.
    static func invalidBearerToken(_ reason: String) -> String {
        "Bearer error=\"invalid_token\", error_description=\"\(quotable(reason))\""
    }

    static func quotable(_ text: String) -> String {
        String(text.unicodeScalars.filter { $0 != "\"" && $0 != "\\" && $0.value >= 0x20 && $0.value < 0x7f }.map(Character.init))
    }

    /// Status, page title and a sentence a person can act on; internals stay in the log.
    static func describe(_ error: any Error, in language: Language) -> (HTTPResponse.Status, String, String) {
        switch error {
        case let error as AppError:
            let (title, message) = error.words(in: language)
            return (error.status, title, message)
        case let error as ProviderError:
            return describe(error.appError, in: language)
        case let error as IdempotencyRefusal:
            return describe(error.appError, in: language)
        case let error as HTTPError:
            let message = error.body ?? defaultMessage(error.status, in: language)
            return (error.status, error.status.reasonPhrase, message)
        case let error as any HTTPResponseError:
            return (error.status, error.status.reasonPhrase, defaultMessage(error.status, in: language))
        case let error as GraphQLUpstreamError:
            return (error.status, "Tasks are unavailable", error.message)
        case let error as TaskOperationFailed:
            return (.badGateway, "The task server refused", "The task server answered: \(error.description)")
        case is DecodingError:
            return (.badRequest, "Bad Request", "The request body could not be read: \(error)")
        case is PostgresStore.Unreachable:
            return (.serviceUnavailable, "Database unavailable", "The database cannot be reached right now, so nothing was read or changed. Try again in a moment.")
        default:
            return (.internalServerError, language.text("errors.page.went_wrong"), defaultMessage(.internalServerError, in: language))
        }
    }

    static func defaultMessage(_ status: HTTPResponse.Status, in language: Language) -> String {
        switch status {
        case .notFound: language.text("errors.page.not_found")
        case .contentTooLarge: language.text("errors.page.too_large")
        case .methodNotAllowed: language.text("errors.page.method")
        case .internalServerError: language.text("errors.page.internal")
        default: status.reasonPhrase
        }
    }
}
