import Hummingbird

extension Request {
    /// JSON for the API, `.json` paths and clients that ask for JSON over HTML; HTML for everything else: the HTTP
    /// contract's rule. `Request.wantsJSON` asks it of a request, and the edge of a head it refuses (which never
    /// becomes a `Request`).
    public static func wantsJSON(path: String, accept: String?) -> Bool {
        if path.hasPrefix("/api/") || path.hasSuffix(".json") || path == "/graphql" { return true }
        let accept = accept ?? ""
        return accept.utf8.containsBytes(of: "application/json".utf8) && !accept.utf8.containsBytes(of: "text/html".utf8)
    }
}
