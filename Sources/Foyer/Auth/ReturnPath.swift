import Foundation
import HTTPTypes
import Hummingbird

/// Where to send someone after signing in: a path on this host, never another site (an open redirect).
enum ReturnPath {
    static func safe(_ candidate: String?, request: Request) -> String {
        guard let candidate, !candidate.isEmpty, candidate.count <= 2048,
            !candidate.contains("\\"), candidate.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f })
        else { return "/" }
        if candidate.hasPrefix("/") {
            // "//evil.example/x" is a scheme-relative URL to another host.
            guard !candidate.hasPrefix("//"), let url = URLComponents(string: candidate), url.host == nil else { return "/" }
            return isSignInPage(url.path) ? "/" : candidate
        }
        // An absolute URL is allowed only when it names this very host.
        guard let url = URLComponents(string: candidate), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = url.host?.lowercased(), let requestHost = request.head.authority?.lowercased(),
            host == requestHost.split(separator: ":").first.map(String.init) ?? requestHost
        else { return "/" }
        let path = url.percentEncodedPath.isEmpty ? "/" : url.percentEncodedPath
        let target = url.percentEncodedQuery.map { "\(path)?\($0)" } ?? path
        return isSignInPage(path) ? "/" : target
    }

    private static func isSignInPage(_ path: String) -> Bool {
        path == "/sign_in" || path.hasPrefix("/sign_in/")
    }
}
