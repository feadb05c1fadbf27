import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The per-request context: who is asking (if anyone) and from where.
public struct FoyerRequestContext: RequestContext, RemoteAddressRequestContext, Sendable {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    /// The connection the request came on: live streams write their events to it from its event loop.
    public let channel: any Channel
    /// Set by AuthenticationMiddleware when the request carries a live session token.
    public var identity: Identity?
    /// The X-Request-Id this request is logged under and answered with.
    public var requestID: String = ""
    public let reader = ReaderLanguage()

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
        self.channel = source.channel
    }

    /// snake_case keys and ISO-8601 UTC times: what Rails-shaped clients expect.
    public var responseEncoder: JSONEncoder { Self.encoder }

    static let encoder = makeEncoder(keys: .convertToSnakeCase)

    /// The same, for values that name their keys in snake_case themselves (`SnakeCaseKeyed`).
    static let snakeCaseKeyedEncoder = makeEncoder(keys: .useDefaultKeys)

    /// One recipe for both, so the API's times and formatting cannot differ between them.
    private static func makeEncoder(keys: JSONEncoder.KeyEncodingStrategy) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = keys
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// The signed-in user, or an error that answers 401 in the format the client asked for.
    public func requireIdentity() throws -> Identity {
        guard let identity else { throw AuthenticationRequired() }
        return identity
    }
}

/// What pages and helpers read of any of Foyer's request contexts: who is asking, if anyone.
public protocol CallerContext: RequestContext {
    var caller: Identity? { get }
    /// The language the request is answered in.
    var reader: ReaderLanguage { get }
}

extension FoyerRequestContext: CallerContext {
    public var caller: Identity? { identity }
}

/// The context of routes only a signed-in user may use (`router.group(context: SignedInContext.self)`): made from
/// Foyer's context once authentication ran, it refuses anyone else with the 401 the client's format asks for, so a
/// handler has its `identity` without asking.
public struct SignedInContext: ChildRequestContext, RemoteAddressRequestContext, CallerContext {
    public typealias ParentContext = FoyerRequestContext
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    public let identity: Identity
    public let reader: ReaderLanguage

    public init(context: FoyerRequestContext) throws {
        guard let identity = context.identity else { throw AuthenticationRequired() }
        coreContext = context.coreContext
        remoteAddress = context.remoteAddress
        self.identity = identity
        reader = context.reader
    }

    public var caller: Identity? { identity }
    public var responseEncoder: JSONEncoder { FoyerRequestContext.encoder }
}
