import FoyerServer
import HTTPTypes
import Hummingbird

/// `GET /pictures/{id}/{page|thumbnail}`: a post's picture, served like an asset. The URL never names other bytes
/// (a new picture gets a new id), so caches may keep it for a year; WebP goes to clients that take it, JPEG to
/// the rest, and `Vary: Accept` tells caches so. A deleted post's pictures answer `404`, and so do those of a post a
/// moderator removed or holds (or whose author is suspended) to all but its author and moderators, who are served them
/// `private, no-store`.
struct PicturesController {
    let storage: any PictureStorage
    /// Posts' write counter: a picture kept in memory serves only until any post changes (a deleted post's
    /// pictures must answer 404 at once, here and, through the cluster's messages, on every instance).
    let generation: PostRepository.Generation
    /// Files read lately, up to 16 MiB of them: a list's thumbnails are asked for by every reader of the list.
    let kept = StartOverCache<FileKey, KeptFile>(maximumCost: 16 << 20)

    struct FileKey: Hashable, Sendable {
        let id: String
        let variant: Picture.Variant
        let encoding: Picture.Encoding
    }

    struct KeptFile: Sendable {
        let generation: Int
        let file: StoredPictureFile
    }

    func addRoutes(to router: FoyerRouter) {
        router.get("/pictures/{id}/{variant}", use: show)
    }

    @Sendable func show(request: Request, context: FoyerRequestContext) async throws -> Response {
        let id = try context.parameters.require("id")
        let variant = Picture.Variant(rawValue: try context.parameters.require("variant"))
        let encoding = Picture.Encoding(accept: request.headers.value(.accept))
        let notFound = AppError(.notFound, title: Phrase("pictures.errors.not_found.title"), message: Phrase("pictures.errors.not_found"))
        guard let variant, Picture.isWellFormed(id: id[...]) else { throw notFound }
        // The bytes behind a URL never change, so the URL and the encoding are a strong validator.
        let etag = "\"\(id)-\(variant.rawValue)-\(encoding.rawValue)\""
        // `nosniff` comes with every answer (SecurityHeaders).
        var headers: HTTPFields = [.cacheControl: "public, max-age=31536000, immutable", .eTag: etag, .vary: "Accept"]
        // Read even for a 304: a deleted picture must not be confirmed to a cache.
        guard let file = try await file(FileKey(id: id, variant: variant, encoding: encoding)) else { throw notFound }
        if file.hidden {
            guard let caller = context.identity, caller.userId == file.authorId || caller.user.moderates else { throw notFound }
            headers[.cacheControl] = "private, no-store"
        }
        let bytes = file.bytes
        if let ifNoneMatch = request.headers.value(.ifNoneMatch), PathConfigurationController.matches(ifNoneMatch, etag: etag) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = encoding.contentType
        headers[.contentLength] = String(bytes.readableBytes)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: bytes))
    }

    private func file(_ key: FileKey) async throws -> StoredPictureFile? {
        let current = generation.current  // read first: a write meanwhile leaves what is kept stale at once
        if let kept = kept.value(for: key), kept.generation == current { return kept.file }
        guard let file = try await storage.file(id: key.id, variant: key.variant, encoding: key.encoding) else { return nil }
        kept.keep(KeptFile(generation: current, file: file), for: key, cost: file.bytes.readableBytes)
        return file
    }
}
