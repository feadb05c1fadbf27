import CompressNIO
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// gzip for HTML, JSON, CSS, JavaScript and plain text answers of 1 KB or more, when the request's
/// `Accept-Encoding` allows it. Those types always carry `Vary: Accept-Encoding`, so a cache in between keeps the
/// two forms apart. Never for event streams (no known length), `304`s, ranges, or `HEAD`.
///
/// The body is compressed whole and sent with its `Content-Length`, as native clients prefer. An answer with an
/// `ETag` (Public/ files such as Turbo's 70 KB script, the path configuration: each ETag names one version of the
/// bytes) is compressed once, harder, and kept by path and ETag. A strong ETag turns weak, as nginx does, since the
/// bytes sent differ; the routes that set ETags compare `If-None-Match` weakly, so revalidation still ends in `304`.
struct CompressionMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext

    static let minimumSize = 1024
    /// Larger bodies go as they are rather than be held in memory whole.
    static let maximumSize = 8 << 20
    /// Per-request answers: fast (nginx's default gzip level is 1). Kept copies: as small as zlib makes them.
    static let dynamicLevel: Int32 = 4
    static let keptLevel: Int32 = 9

    /// Compressed copies of answers with an ETag, by path and ETag, bounded by bytes held.
    let kept = StartOverCache<String, ByteBuffer>(maximumCost: 16 << 20)

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        guard Self.isCompressible(response.headers.value(.contentType)) else { return response }
        Self.varyOnAcceptEncoding(&response.headers)
        // Accept-Encoding is read only for answers that could be compressed, not on every request.
        guard request.method != .head, Self.acceptsGzip(request.headers[values: .acceptEncoding]),
            response.status != .notModified, response.status != .partialContent, !response.headers.has(.contentEncoding), !response.headers.has(.contentRange),
            let length = response.body.contentLength, (Self.minimumSize...Self.maximumSize).contains(length)
        else { return response }

        let eTag = response.headers.value(.eTag)
        let key = eTag.map { request.uri.path + " " + $0 }
        let compressed: ByteBuffer
        if let key, let copy = kept.value(for: key) {
            compressed = copy
        } else {
            var body = try await response.body.collected(expecting: length)
            compressed = try body.compress(with: .gzip(configuration: .init(compressionLevel: key == nil ? Self.dynamicLevel : Self.keptLevel)))
            if let key { kept.keep(compressed, for: key, cost: compressed.readableBytes) }
        }
        response.body = ResponseBody(byteBuffer: compressed)
        response.headers[.contentEncoding] = "gzip"
        // Response's initializer set the length from the body it was made with.
        response.headers[.contentLength] = String(compressed.readableBytes)
        if let eTag, !eTag.hasPrefix("W/") { response.headers[.eTag] = "W/" + eTag }
        return response
    }

    /// Checked on every answer, so read as bytes: no splitting, lower-casing or Foundation (a page's checks here
    /// were 4 % of its CPU).
    static func isCompressible(_ contentType: String?) -> Bool {
        guard var type = contentType?.utf8[...] else { return false }
        if let end = type.firstIndex(of: UInt8(ascii: ";")) { type = type[..<end] }
        type = ASCIIToken.trimmed(type)
        return compressibleTypes.contains { ASCIIToken.equal(type, $0) } || ASCIIToken.hasSuffix(type, jsonSuffix)
    }

    private static let compressibleTypes = [
        "text/html", "text/css", "text/plain", "text/javascript", "application/javascript", "application/json", "image/svg+xml",
    ].map { Array($0.utf8) }
    private static let jsonSuffix = Array("+json".utf8)

    /// Says the answer depends on `Accept-Encoding`, unless a `Vary` field already lists it (or `*`); several
    /// `Vary` fields become one.
    static func varyOnAcceptEncoding(_ headers: inout HTTPFields) {
        var existing: String?
        var several = false
        for field in headers where field.name == .vary {
            if ASCIIToken.list(field.value, contains: acceptEncoding) || ASCIIToken.list(field.value, contains: anything) { return }
            if existing == nil { existing = field.value } else { several = true }
        }
        if several {
            headers[.vary] = (headers[values: .vary] + ["Accept-Encoding"]).joined(separator: ", ")
        } else {
            headers[.vary] = existing.map { $0 + ", Accept-Encoding" } ?? "Accept-Encoding"
        }
    }

    private static let acceptEncoding = Array("accept-encoding".utf8)
    private static let anything = [UInt8(ascii: "*")]

    /// `gzip` (or `*`) listed without `q=0`.
    static func acceptsGzip(_ values: [String]) -> Bool {
        var gzip: Bool?
        var any: Bool?
        for value in values {
            for item in value.split(separator: ",") {
                let parts = item.split(separator: ";").map { $0.trimmingEnds(where: { $0 == " " || $0 == "\t" }).lowercased() }
                guard let coding = parts.first else { continue }
                let refused = parts.dropFirst().contains { $0.hasPrefix("q=") && Double($0.dropFirst(2)) == 0 }
                if coding == "gzip" || coding == "x-gzip" { gzip = !refused } else if coding == "*" { any = !refused }
            }
        }
        return gzip ?? any ?? false
    }
}

/// Header values read as ASCII bytes, letters compared without case.
enum ASCIIToken {
    static func trimmed(_ bytes: Substring.UTF8View) -> Substring.UTF8View {
        var bytes = bytes
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes.removeFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes.removeLast() }
        return bytes
    }

    /// `bytes` equal `lowercased`, whose letters are all lower case.
    static func equal(_ bytes: Substring.UTF8View, _ lowercased: [UInt8]) -> Bool {
        bytes.count == lowercased.count && zip(bytes, lowercased).allSatisfy { lower($0) == $1 }
    }

    static func hasSuffix(_ bytes: Substring.UTF8View, _ lowercased: [UInt8]) -> Bool {
        bytes.count >= lowercased.count && equal(bytes[bytes.index(bytes.endIndex, offsetBy: -lowercased.count)...], lowercased)
    }

    /// A comma-separated list (`Vary: User-Agent, Accept-Encoding`) that holds `lowercased` as one of its items.
    static func list(_ value: String, contains lowercased: [UInt8]) -> Bool {
        var rest = value.utf8[...]
        while true {
            let end = rest.firstIndex(of: UInt8(ascii: ",")) ?? rest.endIndex
            if equal(trimmed(rest[..<end]), lowercased) { return true }
            guard end != rest.endIndex else { return false }
            rest = rest[rest.index(after: end)...]
        }
    }

    private static func lower(_ byte: UInt8) -> UInt8 {
        (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
    }
}
