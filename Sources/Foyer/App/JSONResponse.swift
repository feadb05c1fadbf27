import Foundation
import Hummingbird

extension Response {
    /// A JSON body encoded the API's way (snake_case keys, ISO-8601 times).
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        json(encoded: encodeJSON(value), status: status)
    }

    /// A JSON body encoded earlier (and perhaps cached).
    static func json(encoded body: ByteBuffer, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: body))
    }

    static func encodeJSON(_ value: some Encodable) -> ByteBuffer {
        encode(value, with: FoyerRequestContext.encoder)
    }

    /// A value whose keys are snake_case already: encoded without the key conversion pass.
    static func json(_ value: some SnakeCaseKeyed, status: HTTPResponse.Status = .ok) -> Response {
        json(encoded: encodeJSON(value), status: status)
    }

    static func encodeJSON(_ value: some SnakeCaseKeyed) -> ByteBuffer {
        encode(value, with: FoyerRequestContext.snakeCaseKeyedEncoder)
    }

    private static func encode(_ value: some Encodable, with encoder: JSONEncoder) -> ByteBuffer {
        do {
            return ByteBuffer(bytes: try encoder.encode(value))
        } catch {
            preconditionFailure("encoding a response value failed: \(error)")
        }
    }
}

/// Encodable whose coding keys (its own and those of everything it holds) are the API's snake_case names, so the
/// encoder need not convert each key on every response. For the hot JSON routes: the conversion was a third of
/// encoding a post.
protocol SnakeCaseKeyed: Encodable {}

extension Array: SnakeCaseKeyed where Element: SnakeCaseKeyed {}
