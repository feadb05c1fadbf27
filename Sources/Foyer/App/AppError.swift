import HTTPTypes
import Hummingbird

/// An error with a status and words for a person; rendered as an HTML page or JSON by ErrorMiddleware.
public struct AppError: Error, CustomStringConvertible {
    public let status: HTTPResponse.Status
    public let title: String
    public let message: String

    public init(_ status: HTTPResponse.Status, title: String? = nil, message: String) {
        self.status = status
        self.title = title ?? status.reasonPhrase
        self.message = message
    }

    public var description: String { "\(status.code) \(message)" }
}
