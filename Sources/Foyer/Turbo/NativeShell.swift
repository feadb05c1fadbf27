import FoyerServer
import HTTPTypes
import Hummingbird

extension Request {
    /// Hotwire Native and the older Turbo Native shells put "Hotwire Native" or "Turbo Native" in their User-Agent.
    /// Requests a service worker makes carry the WebView's default User-Agent, not the shell's: a page rendered
    /// for a shell sets the `native_shell` cookie (Public/offline.js), which says the same for them.
    var isNativeShell: Bool {
        if let agent = headers.value(.userAgent)?.utf8, agent.containsBytes(of: "Hotwire Native".utf8) || agent.containsBytes(of: "Turbo Native".utf8) {
            return true
        }
        return cookie(named: Self.nativeShellCookie) == "1"
    }

    static let nativeShellCookie = "native_shell"
}

/// The three routes a native shell intercepts to close a modal or move back, as turbo-rails names them.
enum HistoricalLocation: String, CaseIterable {
    case recede, resume, refresh

    var path: String { "/\(rawValue)_historical_location" }

    static let template = "turbo/historical_location"
}

extension Response {
    static func seeOther(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location])
    }

    /// After a successful form: browsers go to `location`; native shells go to a historical-location route
    /// (dismiss the modal and go back, stay, or reload the screen below).
    static func afterSubmit(_ request: Request, redirectTo location: String, native: HistoricalLocation = .recede) -> Response {
        .seeOther(request.isNativeShell ? native.path : location)
    }
}

struct HistoricalLocationController {
    let views: Views

    func addRoutes(to router: FoyerRouter) {
        for location in HistoricalLocation.allCases {
            router.get(RouterPath(location.path)) { request, context in
                views.page(HistoricalLocation.template, ["title": location.rawValue.capitalized], request: request, context: context)
            }
        }
    }
}
