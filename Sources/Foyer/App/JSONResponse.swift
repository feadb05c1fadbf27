import Foundation
import HTTPTypes
import Hummingbird

extension Response {
    /// A JSON body encoded the API's way (snake_case keys, ISO-8601 times).
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        let data: Data
        do {
            data = try FoyerRequestContext.encoder.encode(value)
        } catch {
            preconditionFailure("encoding a response value failed: \(error)")
        }
        return Response(
            status: status,
            headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: data))
        )
    }
}
