import Foundation
import Hummingbird

/// Login CSRF: before anyone is signed in there is no session to bind a CSRF token to, so the sign-in form is bound
/// to a short-lived pre-session cookie instead (as Rails does with its session before login). The form echoes the
/// cookie's value; a page on another site can make a browser post the form but cannot read or set that cookie.
enum SignInFormToken {
    static let cookieName = "foyer_sign_in"
    /// Long enough for a form left open over lunch; a stale one gets the form again with a fresh token.
    static let maxAge = 12 * 60 * 60

    /// The browser's token, and the cookie to set when it had none (or a malformed one).
    static func forPage(request: Request, secure: Bool) -> (token: String, cookie: Cookie?) {
        if let existing = presentedCookie(request) { return (existing, nil) }
        let token = SessionRepository.randomToken()
        return (token, Cookie(name: cookieName, value: token, maxAge: maxAge, path: "/", secure: secure, httpOnly: true, sameSite: .lax))
    }

    static func matches(_ presented: String?, request: Request) -> Bool {
        guard let presented, let expected = presentedCookie(request) else { return false }
        return CSRFMiddleware.constantTimeEquals(presented, expected)
    }

    private static func presentedCookie(_ request: Request) -> String? {
        guard let value = request.cookies[cookieName]?.value, value.utf8.count == 43,
            value.utf8.allSatisfy(Self.isBase64URL)
        else { return nil }
        return value
    }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x2D || byte == 0x5F
    }
}
