import Foundation
import GraphQL

/// The legacy `graphql-ws` protocol (subscriptions-transport-ws), which the showcase server speaks, over an upstream
/// websocket: `connection_init` carrying the token as the showcase expects, then every message after it, decoded,
/// to `handle`. `connection_error` is the upstream refusing the token; a message that is not graphql-ws JSON ends
/// the session. Shared by relayed subscriptions and the live pages' task feed.
enum UpstreamGraphQLWS {
    struct Message: Decodable {
        let type: String
        let id: String?
        let payload: Map?
    }

    /// Runs until the upstream closes the socket or `handle` returns false. `handle` gets the message as decoded and
    /// as sent, and the socket to answer on.
    static func session(
        url: String, bearerToken: String?,
        handle: (Message, _ text: String, UpstreamWebSocket.Connection) async throws -> Bool
    ) async throws {
        let initPayload: Map = bearerToken.map { ["Authorization": .string("Bearer \($0)")] } ?? [:]
        let connectionInit = String(decoding: try JSONEncoder().encode(["type": "connection_init", "payload": initPayload] as Map), as: UTF8.self)
        try await UpstreamWebSocket.connect(url: url, subprotocol: "graphql-ws", maximumMessageSize: RemoteGraphQLExecutor.maximumReplySize) { socket in
            try await socket.send(connectionInit)
            for try await text in socket.messages {
                guard let message = try? JSONDecoder().decode(Message.self, from: Data(text.utf8)) else {
                    throw GraphQLUpstreamError.invalidReply("a websocket message that is not graphql-ws JSON")
                }
                if message.type == "connection_error" { throw GraphQLUpstreamError.sessionExpired }
                guard try await handle(message, text, socket) else { return }
            }
        }
    }
}
