import Crypto
import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird
import Synchronization

/// Pages that keep working offline: `GET /service-worker.js` (Public/foyer-worker.js after a line of settings the
/// server writes: the path configuration's offline rules, what to precache, and a version that changes whenever any
/// of them does, so a release reaches browsers), and `GET /offline`, the page shown for a page never visited.
/// The worker itself, the write queue and the notices are JavaScript: Public/foyer-worker.js and Public/offline.js.
struct OfflineFeature {
    static let workerPath = "/service-worker.js"
    static let offlinePagePath = "/offline"
    let worker: ByteBuffer
    let workerETag: String
    let views: Views

    init(config: FoyerConfig, views: Views, rules: OfflineRules) throws {
        let precache = [Self.offlinePagePath, "/foyer.css", "/live.js", "/picture-input.js", "/passkeys.js", "/offline.js"] + (config.turboScriptURL.hasPrefix("/") ? [config.turboScriptURL] : [])
        let source = try Self.read(config.publicDirectory + "/foyer-worker.js")
        var version = SHA256()
        version.update(data: Array(source.utf8))
        // The offline page changes with the templates and the catalogs (and is made in a language when first asked for).
        version.update(data: Array(views.fingerprint.utf8))
        for path in precache.dropFirst() { version.update(data: Array(try Self.read(config.publicDirectory + path).utf8)) }
        var settings = rules.workerSettings
        settings["enabled"] = config.offline
        settings["precache"] = precache
        settings["offlinePage"] = Self.offlinePagePath
        version.update(data: try JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys]))
        settings["version"] = version.finalize().prefix(8).hexString
        let prelude = try JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys, .withoutEscapingSlashes])
        worker = ByteBuffer(string: "self.FOYER_OFFLINE = \(String(decoding: prelude, as: UTF8.self))\n" + source)
        workerETag = "\"\(settings["version"]!)\""
        self.views = views
    }

    func addRoutes(to router: FoyerRouter) {
        router.get(RouterPath(Self.workerPath)) { request, _ in
            // Browsers check for a new worker at least daily and on navigations; no-cache makes every check reach us.
            var headers: HTTPFields = [.cacheControl: "no-cache", .eTag: workerETag]
            if let ifNoneMatch = request.headers.value(.ifNoneMatch), PathConfigurationController.matches(ifNoneMatch, etag: workerETag) {
                return Response(status: .notModified, headers: headers)
            }
            headers[.contentType] = "text/javascript; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: worker))
        }
        // The same for everyone who reads that language (no account, no form token), so one precached copy serves
        // whoever is offline.
        router.get(RouterPath(Self.offlinePagePath)) { request, context in
            let language = views.language(for: request, context: context)
            let page = views.standalonePage("offline/show", OfflinePageView(), title: language.text("offline.title"), in: language)
            return Response(status: .ok, headers: views.pageHeaders(in: language), body: .init(byteBuffer: page))
        }
    }

    private static func read(_ path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw StartupError("offline: cannot read \(path)") }
        return String(decoding: data, as: UTF8.self)
    }
}

/// The offline page's values; its words are the template's, and the list of what is kept is filled in by
/// Public/offline.js from the browser's caches.
struct OfflinePageView {}

/// Whose a page is, for the worker: pages of one person are kept apart from another's and dropped when someone else
/// signs in. A digest of the user id, so the header names nobody; `public` for a page without a session.
enum OfflineOwner {
    static func name(of identity: Identity?) -> String {
        guard let identity else { return "public" }
        if let known = names.withLock({ $0[identity.userId] }) { return known }
        let name = SHA256.hash(data: Array("foyer offline owner \(identity.userId)".utf8)).prefix(12).hexString
        names.withLock { names in
            if names.count >= 10_000 { names.removeAll(keepingCapacity: true) }
            names[identity.userId] = name
        }
        return name
    }

    /// Every signed-in page names its owner: a hash per page was 1 % of one.
    private static let names = Mutex<[Int64: String]>([:])
}

extension HTTPField.Name {
    static let offlineOwner = HTTPField.Name("Foyer-Offline-Owner")!
}
