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
        guard Self.isCompressible(response.headers[.contentType]) else { return response }
        let vary = response.headers[values: .vary]
        if !vary.contains(where: { $0.lowercased().contains("accept-encoding") }) {
            response.headers[.vary] = (vary + ["Accept-Encoding"]).joined(separator: ", ")
        }
        // Accept-Encoding is read only for answers that could be compressed, not on every request.
        guard request.method != .head, Self.acceptsGzip(request.headers[values: .acceptEncoding]),
            response.status != .notModified, response.status != .partialContent, response.headers[.contentEncoding] == nil, response.headers[.contentRange] == nil,
            let length = response.body.contentLength, (Self.minimumSize...Self.maximumSize).contains(length)
        else { return response }

        let eTag = response.headers[.eTag]
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

    static func isCompressible(_ contentType: String?) -> Bool {
        // Checked on every answer: no splitting or lower-casing unless the type is written unusually.
        guard let contentType else { return false }
        var type = contentType[...]
        if let end = type.firstIndex(of: ";") { type = type[..<end] }
        if type.contains(where: { $0 == " " || ("A"..."Z").contains($0) }) {
            type = Substring(type.trimmingEnds(where: { $0 == " " }).lowercased())
        }
        return type == "text/html" || type == "text/css" || type == "text/plain" || type == "text/javascript"
            || type == "application/javascript" || type == "application/json" || type.hasSuffix("+json")
            || type == "image/svg+xml"
    }

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
