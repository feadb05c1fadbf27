import HTTPTypes
import Hummingbird

/// `GET /pictures/{id}/{page|thumbnail}`: a post's picture, served like an asset. The URL never names other bytes
/// (a new picture gets a new id), so caches may keep it for a year; WebP goes to clients that take it, JPEG to
/// the rest, and `Vary: Accept` tells caches so. A deleted post's pictures answer `404`.
struct PicturesController {
    let storage: any PictureStorage

    func addRoutes(to router: FoyerRouter) {
        router.get("/pictures/{id}/{variant}", use: show)
    }

    @Sendable func show(request: Request, context: FoyerRequestContext) async throws -> Response {
        let id = try context.parameters.require("id")
        let variant = Picture.Variant(rawValue: try context.parameters.require("variant"))
        let encoding = Picture.Encoding(accept: request.headers[.accept])
        let notFound = AppError(.notFound, title: "Picture not found", message: "There is no such picture. Its post may have been deleted or given another.")
        guard let variant, Picture.isWellFormed(id: id[...]) else { throw notFound }
        // The bytes behind a URL never change, so the URL and the encoding are a strong validator.
        let etag = "\"\(id)-\(variant.rawValue)-\(encoding.rawValue)\""
        // `nosniff` comes with every answer (SecurityHeaders).
        var headers: HTTPFields = [.cacheControl: "public, max-age=31536000, immutable", .eTag: etag, .vary: "Accept"]
        if let ifNoneMatch = request.headers[.ifNoneMatch], PathConfigurationController.matches(ifNoneMatch, etag: etag) {
            // Still there? A deleted picture must not be confirmed to a cache.
            guard try await storage.file(id: id, variant: variant, encoding: encoding) != nil else { throw notFound }
            return Response(status: .notModified, headers: headers)
        }
        guard let bytes = try await storage.file(id: id, variant: variant, encoding: encoding) else { throw notFound }
        headers[.contentType] = encoding.contentType
        headers[.contentLength] = String(bytes.readableBytes)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: bytes))
    }
}
