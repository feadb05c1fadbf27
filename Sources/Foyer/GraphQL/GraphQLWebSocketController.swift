import Foundation
import FoyerServer
import GraphQL
import HTTPTypes
import Hummingbird
import NIOHTTP1
import NIOHTTPTypesHTTP1
import NIOCore
import NIOWebSocket

/// The two GraphQL-over-WebSocket dialects, chosen by the subprotocol the client offers. They carry the same
/// operations; they differ in words and in how they refuse.
enum GraphQLWebSocketDialect: String, Sendable {
    /// The `graphql-ws` library's protocol: today's clients.
    case transportWS = "graphql-transport-ws"
    /// subscriptions-transport-ws, Apollo's legacy one: what the showcase apps speak.
    case legacy = "graphql-ws"

    /// The newer one when a client offers both.
    static func chosen(from offered: [String]) -> Self? {
        let names = offered.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        if names.contains(Self.transportWS.rawValue) { return .transportWS }
        if names.contains(Self.legacy.rawValue) { return .legacy }
        return nil
    }

    var startType: String { self == .legacy ? "start" : "subscribe" }
    var stopType: String { self == .legacy ? "stop" : "complete" }
    var resultType: String { self == .legacy ? "data" : "next" }
}

/// WebSocket `/graphql`: subscriptions, and queries and mutations too, for a signed-in user. The user is known
/// from the `connection_init` payload (`Authorization: Bearer …`, as the showcase apps send it) or from the
/// upgrade request itself (a Bearer header, or the session cookie when the page is one of ours). The edge upgrades
/// the connection (`upgrades`); each socket is then a `GraphQLSocket` on its event loop.
struct GraphQLWebSocketController: Sendable {
    let executor: any GraphQLExecutor
    let authenticator: Authenticator
    let credentials: UpstreamCredentialSource
    let metrics: FoyerMetrics
    /// A socket signed in with a session closes when the session ends (4401).
    let holds: SessionHolds
    /// The same rules as over HTTP: persisted queries, trusted documents, introspection, limits.
    let admission: GraphQLAdmission
    /// The same quota as over HTTP: each operation started counts.
    let rateLimit: CallerRateLimit?
    /// When a socket ends on a graceful shutdown: each at its own moment, with 1012 (service restart).
    let drain: Drain

    /// Where websockets are served: the only path whose `Upgrade` the edge lets through.
    static let path = "/graphql"

    /// What an upgrade request is answered with: its dialect, or nil when it offers neither (then it is refused).
    static func dialect(of upgradeRequest: HTTPRequestHead) -> GraphQLWebSocketDialect? {
        GraphQLWebSocketDialect.chosen(from: upgradeRequest.headers[canonicalForm: "sec-websocket-protocol"].map(String.init))
    }

    /// What the edge upgrades, and to whom it hands each socket.
    var upgrades: WebSocketUpgrades {
        let body = ByteBuffer(string: "WebSocket \(Self.path) speaks graphql-transport-ws or graphql-ws: offer one in Sec-WebSocket-Protocol.\n")
        var fields: HTTPFields = [.connection: "close", .contentType: "text/plain; charset=utf-8", .contentLength: String(body.readableBytes)]
        fields.append(contentsOf: SecurityHeaderFields.everywhere)
        return WebSocketUpgrades(
            paths: [Self.path], maximumFrameSize: GraphQLController.maximumBodySize,
            subprotocol: { Self.dialect(of: $0)?.rawValue },
            serve: { channel, upgradeRequest, previous in try self.serve(channel, upgradedFor: upgradeRequest, afterKeptAlive: previous) },
            refusal: (HTTPResponse(status: .badRequest, headerFields: fields), body)
        )
    }

    /// Serves a connection upgraded for `upgradeRequest`: called on its event loop, once the `101` is written. The
    /// socket's handler goes last after NIO's upgrade; after a late one (`KeptAliveUpgrade`), right after `previous`,
    /// the frame codec's last handler, ahead of the HTTP side's.
    func serve(_ channel: any Channel, upgradedFor upgradeRequest: HTTPRequestHead, afterKeptAlive previous: (any ChannelHandler)? = nil) throws {
        guard let dialect = Self.dialect(of: upgradeRequest) else { throw ChannelError.inappropriateOperationForState }
        let request = Request(head: try HTTPRequest(upgradeRequest, secure: false, splitCookie: false), body: .init(buffer: ByteBuffer()))
        let socket = GraphQLSocket(dialect: dialect, upgradeRequest: request, controller: self, readsItself: previous != nil)
        try channel.pipeline.syncOperations.addHandler(socket, position: previous.map { .after($0) } ?? .last)
    }

    /// The identity a `connection_init` payload names, else the one the upgrade request carried.
    /// A Keycloak token that does not verify counts as no identity: the socket is refused like any other.
    func authenticate(initPayload: Map?, upgradeRequest: Request) async throws -> Identity? {
        do {
            // A token bound to the app's key (`DPoP T`) is proved by the upgrade request's DPoP header.
            if let (token, credential) = Self.token(in: initPayload) {
                return try await authenticator.identity(token: token, credential: credential, request: upgradeRequest)
            }
            return try await authenticatedUpgrade(upgradeRequest)
        } catch is AuthenticationRequired {
            return nil
        } catch is DPoPRefusal {
            return nil
        }
    }

    private func authenticatedUpgrade(_ upgradeRequest: Request) async throws -> Identity? {
        guard let (token, credential) = AuthenticationMiddleware.presentedToken(upgradeRequest) else { return nil }
        // Browsers send cookies with cross-site websocket upgrades and no CORS guards them: only our own pages'.
        if credential == .cookie, !upgradeRequest.headers[values: .origin].allSatisfy({ Self.isSameOrigin($0, as: upgradeRequest) }) {
            return nil
        }
        return try await authenticator.identity(token: token, credential: credential, request: upgradeRequest)
    }

    /// `{"Authorization": "Bearer T"}` (or `DPoP T`) in any letter case, or `{"X-Session-Token": "T"}` as our sign-in
    /// hands it out.
    private static func token(in payload: Map?) -> (String, Identity.Credential)? {
        guard case .dictionary(let fields) = payload else { return nil }
        for (key, value) in fields {
            guard case .string(let text) = value else { continue }
            switch key.lowercased() {
            case "authorization": return AuthenticationMiddleware.credential(fromAuthorization: text)
            case "x-session-token": return text.isEmpty ? nil : (text, .bearer)
            default: continue
            }
        }
        return nil
    }

    private static func isSameOrigin(_ origin: String, as request: Request) -> Bool {
        guard let host = request.head.authority, let schemeEnd = origin.range(of: "://") else { return false }
        return origin[schemeEnd.upperBound...].lowercased() == host.lowercased()
    }
}
