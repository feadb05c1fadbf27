import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

/// The plain-HTTP port's answer to everything: the same URL on https://, with `308` (a form's POST stays a POST);
/// with ACME, its HTTP-01 challenges are answered here (RFC 8555 §8.3: the CA asks on port 80, over plain HTTP).
enum HTTPSRedirect {
    static let challengePath = "/.well-known/acme-challenge/"

    static func responder(httpsPort: Int, challenges: ACMECertificates? = nil) -> HTTPChannelHandler.Responder {
        { request, responseWriter, _ in
            if let challenges, request.method == .get, request.uri.path.hasPrefix(challengePath) {
                let token = String(request.uri.path.dropFirst(challengePath.count))
                let answer = token.isEmpty ? nil : await challenges.keyAuthorization(for: token)
                let body = ByteBuffer(string: answer ?? "")
                let fields: HTTPFields = [.contentType: "text/plain", .contentLength: String(body.readableBytes)]
                try await responseWriter.write(response: HTTPResponse(status: answer == nil ? .notFound : .ok, headerFields: fields), body: ResponseBody(byteBuffer: body))
                return
            }
            let status: HTTPResponse.Status
            var fields: HTTPFields = [.contentLength: "0"]
            if let target = location(host: request.head.authority, path: request.uri.string, httpsPort: httpsPort) {
                status = .permanentRedirect
                fields[.location] = target
            } else {
                status = .badRequest
            }
            try await responseWriter.write(response: HTTPResponse(status: status, headerFields: fields), body: ResponseBody())
        }
    }

    /// `https://` and the host the client asked for, on the HTTPS port (named unless it is 443); nil without a host.
    static func location(host: String?, path: String, httpsPort: Int) -> String? {
        guard let host, !host.isEmpty else { return nil }
        // The host without its port: `[::1]:80` keeps its brackets, `example.com:80` loses `:80`.
        let name: Substring =
            if host.hasPrefix("["), let end = host.firstIndex(of: "]") { host[...end] } else { host.split(separator: ":", maxSplits: 1).first ?? "" }
        guard !name.isEmpty, name.allSatisfy({ !$0.isWhitespace && $0 != "/" && $0 != "@" }) else { return nil }
        let port = httpsPort == 443 ? "" : ":\(httpsPort)"
        return "https://\(name)\(port)\(path.hasPrefix("/") ? path : "/")"
    }
}
