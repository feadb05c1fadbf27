import HTTPTypes
import Hummingbird

/// What an uploaded file is, by its first bytes: never by its name or the type the client declared (a phone
/// names a HEIC `image.jpg`; an attacker names an HTML page `cat.png`).
enum PictureFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp, heif

    /// The libvips loader these bytes must also be to libvips: a file that fools this sniffing still reaches no
    /// other decoder.
    var loader: String {
        switch self {
        case .jpeg: "VipsForeignLoadJpegBuffer"
        case .png: "VipsForeignLoadPngBuffer"
        case .webp: "VipsForeignLoadWebpBuffer"
        case .heif: "VipsForeignLoadHeifBuffer"
        }
    }

    /// HEIF's brands for still pictures (ISO/IEC 23008-12): iPhones write `heic`; `mif1` is the generic one.
    static let heifBrands: Set<String> = ["heic", "heix", "heim", "heis", "mif1", "msf1"]

    init?(sniffing bytes: some Collection<UInt8>) {
        let head = Array(bytes.prefix(32))
        func ascii(_ range: Range<Int>) -> String? {
            guard head.count >= range.upperBound else { return nil }
            return String(decoding: head[range], as: UTF8.self)
        }
        if head.starts(with: [0xFF, 0xD8, 0xFF]) {
            self = .jpeg
        } else if head.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            self = .png
        } else if ascii(0..<4) == "RIFF", ascii(8..<12) == "WEBP" {
            self = .webp
        } else if ascii(4..<8) == "ftyp", let brand = ascii(8..<12), Self.heifBrands.contains(brand) {
            self = .heif
        } else if ascii(4..<8) == "ftyp", head.count >= 16, Self.compatibleHEIFBrand(in: bytes) {
            self = .heif
        } else {
            return nil
        }
    }

    /// A `ftyp` box whose major brand is another's but which lists a HEIF brand as compatible.
    private static func compatibleHEIFBrand(in bytes: some Collection<UInt8>) -> Bool {
        let box = Array(bytes.prefix(64))
        let size = box.prefix(4).reduce(0) { $0 << 8 | Int($1) }
        guard size >= 16 else { return false }
        var offset = 16
        while offset + 4 <= min(size, box.count) {
            if heifBrands.contains(String(decoding: box[offset..<offset + 4], as: UTF8.self)) { return true }
            offset += 4
        }
        return false
    }
}

/// How large a picture may be, and the sizes kept.
enum PictureLimits {
    /// An upload's bytes at most: a 48-megapixel phone photo is 5 to 15 MB.
    static let maximumBytes = 20 << 20
    /// Pixels at most, read from the header before anything is decoded: a PNG of a few kilobytes can say
    /// 20,000 × 20,000 and take 1.6 GB to decode (a decompression bomb). 50 megapixels holds any phone's photo.
    static let maximumPixels = 50_000_000
    /// The long side of the picture a post's page shows.
    static let pageSide = 1600
    /// The long side of the thumbnail a list shows.
    static let thumbnailSide = 400
    /// A form with a picture: the picture, and room for the text fields (a post's content is up to 2 MiB).
    static let maximumFormBytes = maximumBytes + Request.maximumBodySize
    /// An alt text's length at most, in code points.
    static let maximumAltLength = 1_000

    /// Why a file of `byteCount` bytes is refused, or nil.
    static func refusal(byteCount: Int) -> PictureRefused? {
        guard byteCount > maximumBytes else { return nil }
        return PictureRefused(.contentTooLarge, "is larger than \(maximumBytes >> 20) MiB (it is \(Request.describe(bytes: byteCount)))")
    }

    /// Why a picture of these dimensions is refused, or nil.
    static func refusal(width: Int, height: Int) -> PictureRefused? {
        guard width > 0, height > 0 else { return PictureRefused(.unprocessableContent, "has no pixels") }
        guard width * height > maximumPixels else { return nil }
        return PictureRefused(
            .unprocessableContent,
            "is \(width) × \(height) pixels, more than \(maximumPixels / 1_000_000) megapixels"
        )
    }
}

/// A picture not taken, with the words for the person: the form shows them under its picture field, the API
/// answers them as `{"errors": {"picture": [...]}}`.
struct PictureRefused: Error, Sendable, Equatable {
    let status: HTTPResponse.Status
    let message: String

    init(_ status: HTTPResponse.Status, _ message: String) {
        (self.status, self.message) = (status, message)
    }
}
