import Foundation
import GraphQL
import HTTPTypes
import NIOCore

/// Subscriptions on the upstream: one legacy `graphql-ws` connection per subscription (the showcase server speaks
/// only that), the caller's token in the `connection_init` payload as the showcase expects.
extension RemoteGraphQLExecutor {
    /// The upstream's own id for our one operation on the connection.
    fileprivate static let operationID = "1"

    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        guard let webSocketURL else {
            throw GraphQLUpstreamError.unreachable("no websocket URL is configured for its subscriptions")
        }
        try health.failFast()
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
                    try await UpstreamGraphQLWS.session(url: webSocketURL, bearerToken: credentials.bearerToken) { message, _, socket in
                        switch message.type {
                        case "connection_ack":
                            health.recordSuccess()
                            try await socket.send(start)
                        case "data":
                            continuation.yield(.next(try Self.bytes(message.payload ?? [:])))
                        case "error":
                            // Legacy servers send one error object; the refusal is always a list.
                            let errors: Map = if case .array = message.payload { message.payload! } else { [message.payload ?? [:]] }
                            continuation.yield(.refused(try Self.bytes(errors)))
                            return false
                        case "complete":
                            return false
                        default:
                            break  // "ka" and anything newer
                        }
                        return true
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

    private static func bytes(_ map: Map) throws -> ByteBuffer {
        ByteBuffer(bytes: try JSONEncoder().encode(map))
    }
}
