import Foundation
import FoyerServer
import Hummingbird

/// A post's picture as kept: never the upload itself (it carries the photo's EXIF, GPS and maker notes), only
/// variants re-encoded from its pixels. Its id is 128 random bits: the URLs cannot be guessed, and never change.
struct Picture: Sendable, Equatable {
    let id: String
    /// The person's own description of it, the image's alt text.
    var alt: String
    /// The page-size variant's pixels.
    let width: Int
    let height: Int
    let thumbnailWidth: Int
    let thumbnailHeight: Int

    enum Variant: String, Sendable, CaseIterable {
        case page, thumbnail
    }

    /// What a variant is encoded as: WebP for clients that say they take it, JPEG for every other.
    enum Encoding: String, Sendable, CaseIterable {
        case jpeg, webp

        var contentType: String { self == .jpeg ? "image/jpeg" : "image/webp" }

        init(accept: String?) {
            self = accept?.contains("image/webp") == true ? .webp : .jpeg
        }
    }

    func path(_ variant: Variant) -> String { "/pictures/\(id)/\(variant.rawValue)" }

    static func newID() -> String {
        Base64URL.randomToken(bytes: 16)
    }

    /// 22 base64url characters, as `newID` makes them: anything else is not looked up.
    static func isWellFormed(id: Substring) -> Bool {
        id.utf8.count == 22 && id.utf8.allSatisfy(Base64URL.isAlphabet)
    }
}

/// A picture just made from an upload: its row and its four files, stored with the post in one transaction.
struct NewPicture: Sendable {
    var picture: Picture
    let files: [File]

    struct File: Sendable {
        let variant: Picture.Variant
        let encoding: Picture.Encoding
        let bytes: ByteBuffer
    }
}

/// What a write does to a post's picture.
enum PictureChange: Sendable {
    /// A new picture in place of any old one (whose files go).
    case replace(NewPicture)
    case remove
    /// The picture stays; its alt text changes.
    case describe(alt: String)
}
