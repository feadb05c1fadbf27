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
        do {
            return ByteBuffer(bytes: try FoyerRequestContext.encoder.encode(value))
        } catch {
            preconditionFailure("encoding a response value failed: \(error)")
        }
    }
}
