import Foundation
import HTTPTypes
import Hummingbird

/// The cookie that carries the same opaque token as `X-Session-Token`, so a native app and its WebView share one sign-in.
enum SessionCookie {
    static let name = "foyer_session"
    /// `maxAge` follows the session's lifetime (`--session-lifetime`): the browser keeps it as long as it can work.
    static func issue(token: String, maxAge: Int, secure: Bool) -> Cookie {
        Cookie(name: name, value: token, maxAge: maxAge, path: "/", secure: secure, httpOnly: true, sameSite: .lax)
    }

    static func expired(secure: Bool) -> Cookie {
        Cookie(
            name: name, value: "", expires: Date(timeIntervalSince1970: 0), maxAge: 0, path: "/",
            secure: secure, httpOnly: true, sameSite: .lax
        )
    }
}
