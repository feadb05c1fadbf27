import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird

extension Request {
    /// JSON for the API, `.json` paths and clients that ask for JSON over HTML; HTML for everything else.
    var wantsJSON: Bool {
        Self.wantsJSON(path: uri.path, accept: headers.value(.accept))
    }

    /// The value of the first cookie called `name`, as Hummingbird's `cookies[name]` reads it, found in one pass
    /// over the Cookie fields' bytes: `cookies` parses every cookie (and its attributes) into a `Cookie` on each
    /// call, which for the session cookie alone was 5 % of a signed-in page.
    func cookie(named name: String) -> String? {
        for field in headers where field.name == .cookie {
            if let value = Self.cookie(named: name, in: field.value) { return value }
        }
        return nil
    }

    /// In one Cookie field (`a=1; b=2`): the value of the first pair called `name`. Read over the field's bytes
    /// in place: a page asks for four cookies (session, native shell, time zone, flash), and walking
    /// `String.UTF8View` indices for them cost a rendered page more than its list's cache lookup.
    static func cookie(named name: String, in field: String) -> String? {
        var field = field
        var name = name
        return field.withUTF8 { bytes in
            name.withUTF8 { name in
                var start = 0
                while start < bytes.count {
                    var end = start
                    while end < bytes.count, bytes[end] != UInt8(ascii: ";") { end += 1 }
                    var first = start
                    while first < end, bytes[first] == 0x20 || bytes[first] == 0x09 { first += 1 }
                    var equals = first
                    while equals < end, bytes[equals] != UInt8(ascii: "=") { equals += 1 }
                    if equals < end, equals - first == name.count, UnsafeBufferPointer(rebasing: bytes[first..<equals]).elementsEqual(name) {
                        return String(decoding: UnsafeBufferPointer(rebasing: bytes[(equals + 1)..<end]), as: UTF8.self)
                    }
                    start = end + 1
                }
                return nil
            }
        }
    }

    var isFormEncoded: Bool {
        Self.startsIgnoringCase(headers.value(.contentType), with: "application/x-www-form-urlencoded")
    }

    /// Whether `value` begins with `prefix` (lowercase ASCII), in any case: compared byte by byte, as every POST
    /// asks whether it is a form (for `_method`) and most are JSON, where lowercasing the type was 2 % of a call.
    static func startsIgnoringCase(_ value: String?, with prefix: StaticString) -> Bool {
        guard var value else { return false }
        return value.withUTF8 { bytes in
            prefix.withUTF8Buffer { prefix in
                bytes.count >= prefix.count && zip(bytes, prefix).allSatisfy { byte, wanted in
                    (byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte) == wanted
                }
            }
        }
    }

    var isJSONBody: Bool {
        guard let type = headers.value(.contentType)?.lowercased() else { return false }
        return type.hasPrefix("application/json") || type.contains("+json")
    }

    /// Served over https: by Foyer itself, or as the load balancer that terminates TLS in front of us says.
    var cameOverHTTPS: Bool {
        head.scheme == "https"
            || headers.value(.xForwardedProto)?.lowercased().split(separator: ",").first?.trimmingCharacters(in: .whitespaces) == "https"
    }

    /// This server as the client reached it: the scheme the load balancer saw, and the Host header.
    var baseURL: String {
        publicOrigin(trustProxy: false)
    }

    /// `scheme://host[:port]` as the client reached us: through the load balancer's `X-Forwarded-Host` when it is
    /// trusted. Names Foyer in redirect URIs and in the issuer apps see through the Keycloak proxy.
    func publicOrigin(trustProxy: Bool) -> String {
        let forwardedHost = trustProxy ? headers.value(.xForwardedHost)?.split(separator: ",").first.map { $0.trimmingCharacters(in: .whitespaces) } : nil
        let host = forwardedHost ?? head.authority ?? "localhost"
        return (cameOverHTTPS ? "https://" : "http://") + host
    }

    func clientIP(context: some RemoteAddressRequestContext, trustProxy: Bool) -> String? {
        if trustProxy, let forwarded = headers.value(.xForwardedFor)?.split(separator: ",").first {
            return forwarded.trimmingCharacters(in: .whitespaces)
        }
        return context.remoteAddress?.ipAddress
    }

    /// Path and query as asked: the place to return to after signing in.
    var pathAndQuery: String {
        uri.query.map { "\(uri.path)?\($0)" } ?? uri.path
    }

    /// The largest form or JSON body a page or the posts API reads. 100,000 characters of post content,
    /// each escaped in JSON as a 12-byte surrogate pair, still fit.
    static let maximumBodySize = 2 << 20

    /// The body, at most `limit` bytes of it (413 past that). A `Content-Length` over the limit is refused before
    /// any of the body is read: a client need not send megabytes to learn they are too many.
    mutating func collectBody(limitedTo limit: Int) async throws -> ByteBuffer {
        if let declared = headers.value(.contentLength).flatMap({ Int($0) }), declared > limit {
            throw AppError(.contentTooLarge, message: Phrase("errors.body_too_large", ["size": Self.describe(bytes: limit)]))
        }
        return try await collectBody(upTo: limit)
    }

    static func describe(bytes: Int) -> String {
        bytes >= 1 << 20 ? "\(bytes >> 20) MiB" : "\(bytes >> 10) KiB"
    }

    /// The body's form fields, urlencoded or multipart (later fields win; files left out). Collects the body, so
    /// handlers can still read it.
    mutating func formFields(limit: Int? = nil) async throws -> [String: String] {
        try await form(limit: limit).fields
    }

    /// The body as a form: its fields, and its files when it is `multipart/form-data`.
    mutating func form(limit: Int? = nil) async throws -> MultipartForm {
        let buffer = try await collectBody(limitedTo: limit ?? bodyLimit)
        guard let boundary = multipartBoundary else { return MultipartForm(fields: FormFields.parse(String(buffer: buffer))) }
        return try MultipartForm(parsing: buffer, boundary: boundary)
    }

    var multipartBoundary: String? {
        headers.value(.contentType).flatMap(MultipartForm.boundary(contentType:))
    }

    /// A urlencoded or a multipart form.
    var isForm: Bool {
        // The type read once: finding a field walks the list of them.
        guard let type = headers.value(.contentType) else { return false }
        return Self.startsIgnoringCase(type, with: "application/x-www-form-urlencoded")
            || (Self.startsIgnoringCase(type, with: "multipart/form-data") && MultipartForm.boundary(contentType: type) != nil)
    }

    /// The most of a body Foyer reads for this request: a post's form or API request may carry a picture.
    var bodyLimit: Int {
        guard multipartBoundary != nil, uri.path.hasPrefix("/posts") || uri.path.hasPrefix("/api/v1/posts") else { return Self.maximumBodySize }
        return PictureLimits.maximumFormBytes
    }
}

extension HTTPField.Name {
    static let xForwardedProto = HTTPField.Name("X-Forwarded-Proto")!
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
    static let xForwardedHost = HTTPField.Name("X-Forwarded-Host")!
    static let xForwardedPort = HTTPField.Name("X-Forwarded-Port")!
    static let xRequestID = HTTPField.Name("X-Request-Id")!
    static let xSessionToken = HTTPField.Name("X-Session-Token")!
}

extension Substring {
    /// Without the characters `unwanted` names at either end; for header values, without Foundation's
    /// `trimmingCharacters`, which costs microseconds on a hot path.
    func trimmingEnds(where unwanted: (Character) -> Bool) -> Substring {
        guard let first = firstIndex(where: { !unwanted($0) }), let last = lastIndex(where: { !unwanted($0) }) else { return "" }
        return self[first...last]
    }
}

enum FormFields {
    static func parse(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]), !name.isEmpty else { continue }
            fields[name] = parts.count > 1 ? decode(parts[1]) ?? "" : ""
        }
        return fields
    }

    private static func decode(_ component: Substring) -> String? {
        component.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}
