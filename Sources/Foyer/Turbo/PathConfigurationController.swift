import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird

/// Serves the path configuration at the addresses Hotwire Native and turbo-ios/turbo-android v1 apps use.
/// Public, cacheable by validator: shells revalidate at every launch and usually get a 304.
struct PathConfigurationController {
    let configuration: PathConfiguration

    func addRoutes(to router: FoyerRouter) {
        for platform in PathConfiguration.Platform.allCases {
            let document = configuration.documents[platform]!
            for path in ["/configurations/\(platform.rawValue)_v1.json", "/turbo/\(platform.rawValue)/path_configuration"] {
                router.get(RouterPath(path)) { request, _ in
                    Self.respond(with: document, to: request)
                }
            }
        }
    }

    static func respond(with document: PathConfiguration.Document, to request: Request) -> Response {
        var headers: HTTPFields = [.cacheControl: "no-cache", .eTag: document.etag]
        if let ifNoneMatch = request.headers.value(.ifNoneMatch), Self.matches(ifNoneMatch, etag: document.etag) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = "application/json"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: document.body)))
    }

    /// `If-None-Match` is a list of validators, weak (`W/"…"`) or strong, or `*`.
    static func matches(_ ifNoneMatch: String, etag: String) -> Bool {
        ifNoneMatch.split(separator: ",").contains { candidate in
            let candidate = candidate.trimmingCharacters(in: .whitespaces)
            return candidate == "*" || candidate == etag || candidate == "W/" + etag
        }
    }
}
