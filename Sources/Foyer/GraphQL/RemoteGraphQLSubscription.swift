import Foundation
import GraphQL
import HTTPTypes
import NIOCore

/// Subscriptions on the upstream: one legacy `graphql-ws` connection per subscription (the showcase server speaks
/// only that), the caller's token in the `connection_init` payload as the showcase expects.
extension RemoteGraphQLExecutor {
    /// The upstream's own id for our one operation on the connection.
    fileprivate static let operationID = "1"

    private struct Envelope: Decodable {
        let type: String
        let payload: Map?
    }

    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        guard let webSocketURL else {
            throw GraphQLUpstreamError.unreachable("no websocket URL is configured for its subscriptions")
        }
        try health.failFast()
        let initPayload: Map = credentials.bearerToken.map { ["Authorization": .string("Bearer \($0)")] } ?? [:]
        let connectionInit = try Self.message(["type": "connection_init", "payload": initPayload])
        // The payload is the request exactly as `execute` posts it.
        struct Start: Encodable {
            let type = "start"
            let id = RemoteGraphQLExecutor.operationID
            let payload: GraphQLRequest
        }
        let start = String(decoding: try JSONEncoder().encode(Start(payload: request)), as: UTF8.self)
        let health = health

        return AsyncThrowingStream { continuation in
            let connection = Task {
                do {
                    try await UpstreamWebSocket.connect(url: webSocketURL, subprotocol: "graphql-ws", maximumMessageSize: Self.maximumReplySize) { socket in
                        try await socket.send(connectionInit)
                        for try await text in socket.messages {
                            guard let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)) else {
                                throw GraphQLUpstreamError.invalidReply("a websocket message that is not graphql-ws JSON")
                            }
                            switch envelope.type {
                            case "connection_ack":
                                health.recordSuccess()
                                try await socket.send(start)
                            case "connection_error":
                                throw GraphQLUpstreamError.sessionExpired
                            case "data":
                                continuation.yield(.next(try Self.bytes(envelope.payload ?? [:])))
                            case "error":
                                // Legacy servers send one error object; the refusal is always a list.
                                let errors: Map = if case .array = envelope.payload { envelope.payload! } else { [envelope.payload ?? [:]] }
                                continuation.yield(.refused(try Self.bytes(errors)))
                                return
                            case "complete":
                                return
                            default:
                                continue  // "ka" and anything newer
                            }
                        }
                    }
                    continuation.finish()
                } catch let error as GraphQLUpstreamError {
                    continuation.finish(throwing: error)
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    health.recordFailure()
                    continuation.finish(throwing: GraphQLUpstreamError.unreachable(String(describing: error)))
                }
            }
            continuation.onTermination = { _ in connection.cancel() }
        }
    }

    private static func message(_ map: Map) throws -> String {
        String(decoding: try JSONEncoder().encode(map), as: UTF8.self)
    }

    private static func bytes(_ map: Map) throws -> ByteBuffer {
        ByteBuffer(bytes: try JSONEncoder().encode(map))
    }
}
