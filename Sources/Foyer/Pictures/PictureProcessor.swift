import CVips
import Foundation
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Turns an upload into what is kept (`NewPicture`), through libvips. Decoding a photo takes tens to hundreds of
/// milliseconds: it runs on a pool of its own, one picture per core at a time, so a burst of uploads slows uploads,
/// not pages. Uploads waiting beyond `maximumWaiting` are answered `503` at once rather than held in memory.
struct PictureProcessor: Sendable {
    static let maximumWaiting = 16

    private static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: max(1, System.coreCount))
        pool.start()
        return pool
    }()

    /// libvips loaded and started at the first picture: untrusted loaders off, no operation cache, one worker
    /// thread per picture (the pool is the parallelism). Nil once started; else why it could not be.
    private static let startFailure: String? = {
        var error = [CChar](repeating: 0, count: 512)
        guard foyer_vips_start(1, &error, error.count) != 0 else { return nil }
        return error.textUpToNUL
    }()

    private static let underWay = NIOLockedValueBox(0)

    /// The picture in `bytes`, its variants made and nothing of its metadata kept. Throws `PictureRefused` for what
    /// is not a picture Foyer takes, with words for the person.
    func process(_ bytes: ByteBuffer, alt: String) async throws -> NewPicture {
        if let refused = PictureLimits.refusal(byteCount: bytes.readableBytes) { throw refused }
        guard let format = PictureFormat(sniffing: bytes.readableBytesView) else {
            throw PictureRefused(.unprocessableContent, "is not a JPEG, PNG, WebP or HEIC picture")
        }
        let admitted = Self.underWay.withLockedValue { count in
            guard count < Self.maximumWaiting + Self.pool.numberOfThreads else { return false }
            count += 1
            return true
        }
        guard admitted else {
            throw AppError(.serviceUnavailable, title: Phrase("pictures.errors.busy.title"), message: Phrase("pictures.errors.busy"))
        }
        defer { Self.underWay.withLockedValue { $0 -= 1 } }
        return try await Self.pool.runIfActive { try Self.make(bytes, format: format, alt: alt) }
    }

    private static func make(_ bytes: ByteBuffer, format: PictureFormat, alt: String) throws -> NewPicture {
        if let startFailure { throw AppError(.internalServerError, message: "libvips could not be started: \(startFailure)") }
        return try bytes.withUnsafeReadableBytes { buffer throws -> NewPicture in
            let (base, length) = (buffer.baseAddress, buffer.count)
            // libvips' own sniffing must agree: bytes that fooled ours still reach no other decoder.
            guard let loader = foyer_vips_loader(base, length).map({ String(cString: $0) }), loader == format.loader else {
                throw PictureRefused(.unprocessableContent, "is not a readable \(format.name) picture")
            }
            var error = [CChar](repeating: 0, count: 512)
            var (width, height): (Int32, Int32) = (0, 0)
            guard foyer_vips_header(base, length, &width, &height, &error, error.count) == 0 else {
                throw PictureRefused(.unprocessableContent, "could not be read as a \(format.name) picture")
            }
            // Refused from the header, before a pixel is decoded.
            if let refused = PictureLimits.refusal(width: Int(width), height: Int(height)) { throw refused }
            var variants = foyer_vips_variants()
            guard foyer_vips_variants_make(
                base, length, Int32(PictureLimits.pageSide), Int32(PictureLimits.thumbnailSide), 82, 80, &variants, &error, error.count
            ) == 0 else {
                let message = error.textUpToNUL
                let reason = message.split(separator: "\n").first.map(String.init) ?? ""
                throw PictureRefused(.unprocessableContent, "could not be read as a \(format.name) picture (it may be cut short): \(reason)")
            }
            defer { foyer_vips_variants_free(&variants) }
            func file(_ variant: Picture.Variant, _ encoding: Picture.Encoding, _ encoded: foyer_vips_file) throws -> NewPicture.File {
                var bytes = Array(UnsafeRawBufferPointer(start: encoded.bytes, count: encoded.length))
                if encoding == .webp {
                    guard let stripped = WebPContainer.withoutMetadata(bytes) else {
                        throw AppError(.internalServerError, message: "libvips made a WebP file that could not be read back.")
                    }
                    bytes = stripped
                }
                return NewPicture.File(variant: variant, encoding: encoding, bytes: ByteBuffer(bytes: bytes))
            }
            let picture = Picture(
                id: Picture.newID(), alt: alt,
                width: Int(variants.page_jpeg.width), height: Int(variants.page_jpeg.height),
                thumbnailWidth: Int(variants.thumbnail_jpeg.width), thumbnailHeight: Int(variants.thumbnail_jpeg.height)
            )
            return NewPicture(picture: picture, files: [
                try file(.page, .jpeg, variants.page_jpeg), try file(.page, .webp, variants.page_webp),
                try file(.thumbnail, .jpeg, variants.thumbnail_jpeg), try file(.thumbnail, .webp, variants.thumbnail_webp),
            ])
        }
    }
}

extension PictureFormat {
    var name: String { self == .heif ? "HEIC" : rawValue.uppercased() }
}

extension [CChar] {
    /// What a C function wrote into this buffer: its text up to the terminating NUL.
    fileprivate var textUpToNUL: String {
        String(decoding: prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
