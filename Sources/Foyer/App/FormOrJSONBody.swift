import Foundation
import Hummingbird

/// A body an API route takes alike as JSON (flat, or nested as Rails clients send) or as a urlencoded form.
protocol FormOrJSONBody: Decodable {
    init(fields: [String: String])
    /// What a JSON body should look like, for the `400` that answers one that does not parse.
    static var expectedJSON: String { get }
}

extension Request {
    /// The body as `Body`, from a form or from JSON; `400` saying what was expected when the JSON does not parse.
    /// `emptyAllowed`: an empty body (of any type) is an empty form, for routes whose body is optional.
    mutating func decodeBody<Body: FormOrJSONBody>(as type: Body.Type, emptyAllowed: Bool = false) async throws -> Body {
        let buffer = try await collectBody(limitedTo: SessionsAPIController.maximumBodySize)
        if isFormEncoded || (emptyAllowed && buffer.readableBytes == 0) {
            return Body(fields: FormFields.parse(String(buffer: buffer)))
        }
        do {
            return try JSONDecoder().decode(Body.self, from: Data(buffer: buffer))
        } catch {
            throw AppError(.badRequest, message: Phrase("errors.not_json", ["expected": Body.expectedJSON]))
        }
    }
}
