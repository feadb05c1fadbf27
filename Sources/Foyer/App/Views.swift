import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// Mustache templates from Templates/, loaded once at start, rendered inside the layout every page shares.
public struct Views: Sendable {
    let library: MustacheLibrary
    let turboScriptURL: String

    init(directory: String, turboScriptURL: String) async throws {
        self.library = try await MustacheLibrary(directory: directory)
        self.turboScriptURL = turboScriptURL
        for required in ["layout", "errors/show", "sessions/new"] where library.getTemplate(named: required) == nil {
            throw StartupError("Templates/\(required).mustache is missing from \(directory)")
        }
    }

    /// An HTML page. `values` fill the template; the layout's own values (Turbo, CSRF, who is signed in) are added here.
    /// Forms set `form_page`, which keeps them out of Turbo's snapshot cache: a preview of a form takes typing
    /// that the real page then throws away.
    func page(
        _ template: String, _ values: [String: Any], request: Request, context: FoyerRequestContext,
        status: HTTPResponse.Status = .ok
    ) -> Response {
        var values = values
        values["turbo_url"] = turboScriptURL
        values["native"] = request.isNativeShell
        if let identity = context.identity {
            values["csrf_token"] = identity.session.csrfToken
            values["current_user"] = ["email": identity.user.email]
        }
        guard let html = library.render(values, withTemplate: template) else {
            preconditionFailure("template \(template) is not loaded")
        }
        return Response(
            status: status,
            headers: [.contentType: "text/html; charset=utf-8", .vary: "User-Agent"],
            body: .init(byteBuffer: ByteBuffer(string: html))
        )
    }
}

extension Views {
    /// How pages show a time: "2026-11-21 16:34:52 UTC".
    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601).replacingOccurrences(of: "T", with: " ").replacingOccurrences(of: "Z", with: " UTC")
    }
}

/// A problem found while starting: stops start-up with a message that names it.
public struct StartupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
