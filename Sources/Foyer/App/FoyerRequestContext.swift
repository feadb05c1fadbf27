import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The per-request context: who is asking (if anyone) and from where.
public struct FoyerRequestContext: RequestContext, RemoteAddressRequestContext, Sendable {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    /// Set by AuthenticationMiddleware when the request carries a live session token.
    public var identity: Identity?
    /// The X-Request-Id this request is logged under and answered with.
    public var requestID: String = ""

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    /// snake_case keys and ISO-8601 UTC times: what Rails-shaped clients expect.
    public var responseEncoder: JSONEncoder { Self.encoder }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The signed-in user, or an error that answers 401 in the format the client asked for.
    public func requireIdentity() throws -> Identity {
        guard let identity else { throw AuthenticationRequired() }
        return identity
    }
}
