import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// A PNG made here, pixel by pixel (deflate's stored blocks, no compression): the picture tests need no image
/// library of their own. `declaredWidth`/`Height` may lie about the pixels, as a decompression bomb's header does.
func makePNG(width: Int, height: Int, declaredWidth: Int? = nil, declaredHeight: Int? = nil, pixel: (Int, Int) -> [UInt8]) -> [UInt8] {
    func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
    func bigEndian(_ value: UInt32) -> [UInt8] { [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + data
        return bigEndian(UInt32(data.count)) + typed + bigEndian(crc32(typed))
    }
    var raw: [UInt8] = []
    for y in 0..<height {
        raw.append(0)
        for x in 0..<width { raw += pixel(x, y) }
    }
    var deflated: [UInt8] = [0x78, 0x01]
    var offset = 0
    repeat {
        let block = Array(raw[offset..<min(raw.count, offset + 65535)])
        offset += block.count
        let length = UInt16(block.count)
        deflated += [offset >= raw.count ? 1 : 0, UInt8(length & 0xFF), UInt8(length >> 8), UInt8(~length & 0xFF), UInt8(~length >> 8)] + block
    } while offset < raw.count
    var (a, b): (UInt32, UInt32) = (1, 0)
    for byte in raw { a = (a + UInt32(byte)) % 65521; b = (b + a) % 65521 }
    deflated += bigEndian(b << 16 | a)
    let header = bigEndian(UInt32(declaredWidth ?? width)) + bigEndian(UInt32(declaredHeight ?? height)) + [8, 2, 0, 0, 0]
    return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", header) + chunk("IDAT", deflated) + chunk("IEND", [])
}

/// A multipart/form-data body as browsers send it.
struct MultipartBody {
    let boundary = "----FoyerTestBoundary7MA4YWxkTrZu0gW"
    var bytes: [UInt8] = []

    mutating func field(_ name: String, _ value: String) {
        bytes += Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n".utf8)
    }

    mutating func file(_ name: String, filename: String, type: String = "image/png", _ content: [UInt8]) {
        bytes += Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"; filename=\"\(filename)\"\r\nContent-Type: \(type)\r\n\r\n".utf8)
        bytes += content + Array("\r\n".utf8)
    }

    var closed: ByteBuffer { ByteBuffer(bytes: bytes + Array("--\(boundary)--\r\n".utf8)) }
    var contentType: String { "multipart/form-data; boundary=\(boundary)" }
}

@Suite struct PictureFormatTests {
    @Test func formatsAreKnownByTheirFirstBytesAlone() {
        #expect(PictureFormat(sniffing: [0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10]) == .jpeg)
        #expect(PictureFormat(sniffing: makePNG(width: 1, height: 1) { _, _ in [0, 0, 0] }) == .png)
        #expect(PictureFormat(sniffing: Array("RIFF\u{0}\u{0}\u{0}\u{0}WEBPVP8 ".utf8)) == .webp)
        #expect(PictureFormat(sniffing: [0, 0, 0, 0x18] + Array("ftypheic".utf8) + [0, 0, 0, 0]) == .heif)
        #expect(PictureFormat(sniffing: [0, 0, 0, 0x18] + Array("ftypmif1".utf8) + [0, 0, 0, 0]) == .heif)
        // Another major brand that lists a HEIF brand as compatible.
        #expect(PictureFormat(sniffing: [0, 0, 0, 0x18] + Array("ftypisom".utf8) + [0, 0, 0, 0] + Array("mp41heic".utf8)) == .heif)
    }

    @Test func namesAndLookalikesAreNotPictures() {
        #expect(PictureFormat(sniffing: Array("<html><body>cat.png</body></html>".utf8)) == nil)
        #expect(PictureFormat(sniffing: [0xFF, 0xD8]) == nil, "two bytes are not yet a JPEG")
        #expect(PictureFormat(sniffing: Array("RIFF\u{0}\u{0}\u{0}\u{0}WAVEfmt ".utf8)) == nil, "a RIFF that is not WebP")
        #expect(PictureFormat(sniffing: [0, 0, 0, 0x18] + Array("ftypmp42".utf8) + [0, 0, 0, 0] + Array("isomavc1".utf8)) == nil, "a video")
        #expect(PictureFormat(sniffing: [UInt8]()) == nil)
    }

    @Test func theByteLimitIsTwentyMebibytesAndNotAByteMore() {
        #expect(PictureLimits.refusal(byteCount: 20 << 20) == nil)
        let refused = PictureLimits.refusal(byteCount: (20 << 20) + 1)
        #expect(refused?.status == .contentTooLarge)
        #expect(refused?.message.contains("20 MiB") == true)
    }

    @Test func thePixelLimitIsFiftyMegapixelsAndNotAPixelMore() {
        #expect(PictureLimits.refusal(width: 10_000, height: 5_000) == nil)
        #expect(PictureLimits.refusal(width: 1, height: 50_000_000) == nil)
        #expect(PictureLimits.refusal(width: 1, height: 50_000_001)?.status == .unprocessableContent)
        #expect(PictureLimits.refusal(width: 20_000, height: 20_000)?.message == "is 20000 × 20000 pixels, more than 50 megapixels")
    }

    @Test func webPLosesItsMetadataChunksAndFlagsAndKeepsTheRest() throws {
        func chunk(_ fourCC: String, _ payload: [UInt8]) -> [UInt8] {
            let size = UInt32(payload.count)
            return Array(fourCC.utf8) + [UInt8(size & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size >> 16 & 0xFF), UInt8(size >> 24)]
                + payload + (payload.count % 2 == 1 ? [0] : [])
        }
        let vp8x = chunk("VP8X", [0x2C, 0, 0, 0, 9, 0, 0, 9, 0, 0])  // ICC, EXIF and XMP flags set
        let image = chunk("VP8L", [0x2F, 1, 2, 3, 4])  // odd length: padded
        let body = vp8x + chunk("ICCP", [1, 2, 3, 4]) + image + chunk("EXIF", Array("Exif\u{0}\u{0}GPS".utf8)) + chunk("XMP ", [7])
        let riff = Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBP".utf8) + body
        let stripped = try #require(WebPContainer.withoutMetadata(riff))
        let expected = chunk("VP8X", [0x00, 0, 0, 0, 9, 0, 0, 9, 0, 0]) + image
        #expect(Array(stripped[12...]) == expected)
        let size = Int(stripped[4]) | Int(stripped[5]) << 8 | Int(stripped[6]) << 16 | Int(stripped[7]) << 24
        #expect(size == stripped.count - 8)
        #expect(WebPContainer.withoutMetadata(Array(riff.prefix(20))) == nil, "a chunk cut short")
    }
}

@Suite struct MultipartFormTests {
    @Test func fieldsAndFilesAreReadAndFilesAreTheBytesSent() throws {
        var body = MultipartBody()
        body.field("title", "Line one\r\nLine two")
        body.file("picture", filename: "a \\\"b\\\".png", [0, 13, 10, 45, 45, 255])
        body.field("title", "later wins")
        let form = try MultipartForm(parsing: body.closed, boundary: body.boundary)
        #expect(form.fields == ["title": "later wins"])
        #expect(form.files["picture"]?.filename == "a \"b\".png")
        #expect(form.files["picture"].map { Array($0.bytes.readableBytesView) } == [0, 13, 10, 45, 45, 255])
        #expect(MultipartForm.boundary(contentType: "multipart/form-data; boundary=\"abc def\"") == "abc def")
        #expect(MultipartForm.boundary(contentType: "multipart/form-data; charset=utf-8; BOUNDARY=xyz") == "xyz")
        #expect(MultipartForm.boundary(contentType: "multipart/mixed; boundary=xyz") == nil)
        #expect(MultipartForm.boundary(contentType: "multipart/form-data; boundary=" + String(repeating: "b", count: 71)) == nil)
    }

    @Test func aBodyCutShortOrWithoutItsBoundaryIsA400() throws {
        var body = MultipartBody()
        body.field("title", "T")
        body.file("picture", filename: "p.png", [1, 2, 3])
        let cut = ByteBuffer(bytes: body.bytes.dropLast(3))
        #expect(throws: AppError.self) { try MultipartForm(parsing: cut, boundary: body.boundary) }
        #expect(throws: AppError.self) { try MultipartForm(parsing: ByteBuffer(string: "title=T"), boundary: body.boundary) }
        let nameless = ByteBuffer(string: "--\(body.boundary)\r\nContent-Type: text/plain\r\n\r\nx\r\n--\(body.boundary)--\r\n")
        #expect(throws: AppError.self) { try MultipartForm(parsing: nameless, boundary: body.boundary) }
        let empty = ByteBuffer(string: "--\(body.boundary)--\r\n")
        #expect(try MultipartForm(parsing: empty, boundary: body.boundary).fields.isEmpty)
    }
}

@Suite struct PictureUploadTests {
    /// 640 × 480, red in its top-left quarter.
    static let png = makePNG(width: 640, height: 480) { x, y in x < 320 && y < 240 ? [255, 0, 0] : [20, 60, 200] }

    func upload(_ client: some TestClientProtocol, token: String, method: HTTPRequest.Method = .post, uri: String = "/api/v1/posts",
                _ build: (inout MultipartBody) -> Void) async throws -> TestResponse {
        var body = MultipartBody()
        build(&body)
        var headers = bearer(token)
        headers[.contentType] = body.contentType
        return try await client.execute(uri: uri, method: method, headers: headers, body: body.closed) { $0 }
    }

    @Test(arguments: TestStoreKind.allCases) func anUploadIsServedAsItsVariantsAndGoesWithItsPost(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let created = try await upload(client, token: token) { body in
                body.field("title", "With a picture")
                body.field("alt", "A red corner")
                body.file("picture", filename: "photo.txt", type: "text/plain", Self.png)
            }
            #expect(created.status == .created, "\(created.text)")
            let post = created.json()
            let picture = try #require(post["picture"] as? [String: Any])
            #expect(picture["width"] as? Int == 640 && picture["height"] as? Int == 480, "never enlarged")
            #expect(picture["alt"] as? String == "A red corner")
            let page = try #require((picture["url"] as? String).flatMap { URL(string: $0)?.path })
            let thumbnail = try #require((picture["thumbnail_url"] as? String).flatMap { URL(string: $0)?.path })
            #expect(page.hasPrefix("/pictures/") && page.hasSuffix("/page") && thumbnail.hasSuffix("/thumbnail"))

            var etag = ""
            try await client.execute(uri: page, method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "image/jpeg")
                #expect(response.headers[.contentLength] == String(response.body.readableBytes))
                #expect(response.headers[.cacheControl] == "public, max-age=31536000, immutable")
                #expect(response.headers[.xContentTypeOptions] == "nosniff")
                #expect(response.headers[.vary] == "Accept")
                #expect(Array(response.body.readableBytesView.prefix(3)) == [0xFF, 0xD8, 0xFF])
                etag = try #require(response.headers[.eTag])
            }
            try await client.execute(uri: thumbnail, method: .get, headers: [.accept: "image/avif,image/webp,*/*"]) { response in
                #expect(response.headers[.contentType] == "image/webp")
                #expect(PictureFormat(sniffing: response.body.readableBytesView) == .webp)
                #expect(response.headers[.eTag] != etag, "each encoding its own validator")
            }
            try await client.execute(uri: page, method: .get, headers: [.ifNoneMatch: etag]) { response in
                #expect(response.status == .notModified)
                #expect(response.body.readableBytes == 0)
            }
            try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains(#"src="\#(thumbnail)""#))
                #expect(response.text.contains(#"alt="A red corner""#))
            }

            let id = try #require(post["id"] as? Int)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer(token)) { #expect($0.status == .noContent) }
            for path in [page, thumbnail] {
                try await client.execute(uri: path, method: .get) { #expect($0.status == .notFound) }
                try await client.execute(uri: path, method: .get, headers: [.ifNoneMatch: etag]) { #expect($0.status == .notFound) }
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aPictureIsReplacedDescribedAndRemoved(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let first = try await upload(client, token: token) { body in
                body.field("title", "T")
                body.file("picture", filename: "a.png", Self.png)
            }.json()
            let id = try #require(first["id"] as? Int)
            let firstURL = try #require((first["picture"] as? [String: Any])?["url"] as? String)
            let replaced = try await upload(client, token: token, method: .patch, uri: "/api/v1/posts/\(id)") { body in
                body.file("picture", filename: "b.png", makePNG(width: 2000, height: 500) { _, _ in [0, 200, 0] })
            }
            #expect(replaced.status == .ok, "\(replaced.text)")
            let picture = try #require(replaced.json()["picture"] as? [String: Any])
            #expect(picture["width"] as? Int == 1600 && picture["height"] as? Int == 400, "the long side at most 1600")
            #expect(picture["url"] as? String != firstURL, "a new picture, a new URL")
            try await client.execute(uri: URL(string: firstURL)!.path, method: .get) { #expect($0.status == .notFound) }
            let thumbnail = try #require(URL(string: picture["thumbnail_url"] as! String)?.path)
            try await client.execute(uri: thumbnail, method: .get) { response in
                #expect(response.status == .ok)
            }

            try await client.execute(
                uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: #"{"alt": "Green"}"#)
            ) { response in
                #expect((response.json()["picture"] as? [String: Any])?["alt"] as? String == "Green")
            }
            try await client.execute(
                uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: #"{"picture": "x"}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains("multipart/form-data"))
            }
            try await client.execute(
                uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: #"{"picture": null}"#)
            ) { response in
                #expect(response.json()["picture"] is NSNull)
            }
            try await client.execute(uri: thumbnail, method: .get) { #expect($0.status == .notFound) }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func deletingTheAuthorsAccountDeletesTheirPictures(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client, as: .bob)
            let created = try await upload(client, token: token) { body in
                body.field("title", "Bob's picture")
                body.file("picture", filename: "p.png", Self.png)
            }
            let picture = try #require(created.json()["picture"] as? [String: Any])
            let paths = try ["url", "thumbnail_url"].map { try #require(URL(string: picture[$0] as! String)?.path) }
            for path in paths { try await client.execute(uri: path, method: .get) { #expect($0.status == .ok) } }
            try await client.execute(
                uri: "/api/v1/me", method: .delete, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(string: #"{"password": "\#(TestUser.bob.password)"}"#)
            ) { #expect($0.status == .noContent, "\($0.text)") }
            for path in paths { try await client.execute(uri: path, method: .get) { #expect($0.status == .notFound) } }
        }
    }

    @Test func whatIsNotATakenPictureIsRefusedWithWordsAndNothingIsStored() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let bomb = makePNG(width: 1, height: 1, declaredWidth: 20_000, declaredHeight: 20_000) { _, _ in [0, 0, 0] }
            let cases: [(String, [UInt8], HTTPResponse.Status, String)] = [
                ("cat.png", Array("<html><script>alert(1)</script></html>".utf8), .unprocessableContent, "is not a JPEG, PNG, WebP or HEIC picture"),
                ("bomb.png", bomb, .unprocessableContent, "is 20000 × 20000 pixels, more than 50 megapixels"),
                ("cut.png", Array(Self.png.prefix(Self.png.count / 2)), .unprocessableContent, "could not be read as a PNG picture"),
                ("big.png", Self.png + [UInt8](repeating: 0, count: 20 << 20), .contentTooLarge, "is larger than 20 MiB"),
            ]
            for (name, bytes, status, words) in cases {
                let refused = try await upload(client, token: token) { body in
                    body.field("title", name)
                    body.file("picture", filename: name, bytes)
                }
                #expect(refused.status == status, "\(name): \(refused.text)")
                let errors = try #require(refused.json()["errors"] as? [String: [String]], "\(name)")
                #expect(errors["picture"]?.first?.hasPrefix(words) == true, "\(name): \(errors)")
            }
            try await client.execute(uri: "/api/v1/posts?per_page=100", method: .get) { response in
                #expect(!response.text.contains("cat.png") && !response.text.contains("bomb.png") && !response.text.contains("cut.png"))
            }
        }
    }

    @Test func theFormTakesAPictureAndShowsARefusalBesideItsField() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (headers, csrf) = try await browserSession(client)
            var body = MultipartBody()
            body.field("authenticity_token", csrf)
            body.field("title", "Kept title")
            body.file("picture", filename: "notes.png", Array("just text".utf8))
            var multipart = headers
            multipart[.contentType] = body.contentType
            try await client.execute(uri: "/posts", method: .post, headers: multipart, body: body.closed) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains("Picture is not a JPEG, PNG, WebP or HEIC picture"))
                #expect(response.text.contains(#"value="Kept title""#))
                #expect(response.text.contains(#"enctype="multipart/form-data""#))
            }
            var good = MultipartBody()
            good.field("authenticity_token", csrf)
            good.field("title", "From the form")
            good.field("alt", "Red and blue")
            good.file("picture", filename: "p.png", Self.png)
            multipart[.contentType] = good.contentType
            let location = try await client.execute(uri: "/posts", method: .post, headers: multipart, body: good.closed) { response in
                #expect(response.status == .seeOther, "\(response.text)")
                return try #require(response.headers[.location])
            }
            try await client.execute(uri: location, method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains(#"class="post-picture""#))
                #expect(response.text.contains(#"width="640" height="480" alt="Red and blue""#))
            }
            // Without its token, a multipart form is refused like any other.
            var forged = MultipartBody()
            forged.field("title", "Forged")
            multipart[.contentType] = forged.contentType
            try await client.execute(uri: "/posts", method: .post, headers: multipart, body: forged.closed) { response in
                #expect(response.status == .forbidden)
            }
        }
    }
}
