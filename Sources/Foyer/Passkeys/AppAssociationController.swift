import Crypto
import Foundation
import FoyerServer
import Hummingbird

/// The files iOS and Android fetch before they hand an app Foyer's links and passkeys:
/// `/.well-known/apple-app-site-association` (Universal Links `applinks`, shared credentials `webcredentials`) and
/// `/.well-known/assetlinks.json` (App Links `handle_all_urls`, shared credentials `get_login_creds`). Built once
/// from the settings; `404` when no app of that platform is configured.
struct AppAssociationController {
    /// What the app is sent: pages. Kept in the browser: what a WebView never shows as a screen.
    static let excluded = [
        "/api/*", "/pictures/*", "/streams/*", "/graphql", "/graphql/*", "/sign_out", "/session", "/auth/*", "/.well-known/*",
        "/service-worker.js", "/openapi.json", "/metrics", "/up", "/healthz", "/recede_historical_location",
        "/resume_historical_location", "/refresh_historical_location",
    ]

    struct Document: Sendable {
        let body: Data
        let etag: String

        init(_ object: Any) throws {
            body = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            etag = "\"" + SHA256.hash(data: body).prefix(12).hexString + "\""
        }
    }

    let apple: Document?
    let android: Document?

    init(settings: PasskeySettings) throws {
        if settings.iosAppIDs.isEmpty {
            apple = nil
        } else {
            let components: [[String: Any]] = Self.excluded.map { ["/": $0, "exclude": true, "comment": "not a page"] } + [["/": "/*"]]
            apple = try Document([
                "applinks": ["details": [["appIDs": settings.iosAppIDs, "components": components]]],
                "webcredentials": ["apps": settings.iosAppIDs],
            ])
        }
        if let package = settings.androidPackage {
            let target: [String: Any] = ["namespace": "android_app", "package_name": package, "sha256_cert_fingerprints": settings.androidCertificateFingerprints]
            android = try Document([
                ["relation": ["delegate_permission/common.handle_all_urls", "delegate_permission/common.get_login_creds"], "target": target],
            ])
        } else {
            android = nil
        }
    }

    func addRoutes(to router: FoyerRouter) {
        router.get("/.well-known/apple-app-site-association") { request, _ in try Self.serve(apple, request: request, platform: "iOS") }
        router.get("/.well-known/assetlinks.json") { request, _ in try Self.serve(android, request: request, platform: "Android") }
    }

    private static func serve(_ document: Document?, request: Request, platform: String) throws -> Response {
        guard let document else {
            // JSON whatever the client accepts: only apps' fetchers and their tools ask for these.
            return .json(["error": "No \(platform) app is configured for this server (see Passkeys and app links in the README)."], status: .notFound)
        }
        var headers: HTTPFields = [.contentType: "application/json", .eTag: document.etag, .cacheControl: "public, max-age=3600"]
        if let ifNoneMatch = request.headers.value(.ifNoneMatch), PathConfigurationController.matches(ifNoneMatch, etag: document.etag) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentLength] = String(document.body.count)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(data: document.body)))
    }
}
