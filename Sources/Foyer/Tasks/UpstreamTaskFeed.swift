import Foundation
import GraphQL
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle

/// The remote upstream's task events, for live pages: **one** websocket per Foyer instance (legacy `graphql-ws`,
/// the three task subscriptions on it), whatever the number of open pages. When the socket drops it reconnects
/// with backoff, and since events were missed meanwhile, open pages reload their tasks.
struct UpstreamTaskFeed: Service {
    static let maximumBackoff: Double = 30

    let webSocketURL: String
    /// The token the feed signs in with: the configured upstream token, or a Keycloak client-credentials token.
    let token: @Sendable () async throws -> String?
    let changes: TaskChanges
    let logger: Logger
    /// Told each time the feed is followed again, the first time too: what was read before may be stale.
    var onFollowing: @Sendable () -> Void = {}
    /// True while subscribed: what the feed keeps fresh (kept query answers) may be trusted only then.
    let following = NIOLockedValueBox(false)

    var isFollowing: Bool { following.withLockedValue { $0 } }

    func run() async {
        await cancelWhenGracefulShutdown {
            // Failures in a row, and whether any connection got as far as subscribing.
            let progress = NIOLockedValueBox((failures: 0, subscribedBefore: false))
            while !Task.isCancelled {
                do {
                    defer { following.withLockedValue { $0 = false } }
                    try await follow {
                        following.withLockedValue { $0 = true }
                        onFollowing()
                        let reconnected = progress.withLockedValue { progress in
                            defer { progress = (0, true) }
                            return progress.subscribedBefore
                        }
                        if reconnected { changes.missed() }
                    }
                    logger.info("The upstream closed the task feed; reconnecting")
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("Upstream task feed: \(error)")
                }
                let failures = progress.withLockedValue { progress in
                    progress.failures += 1
                    return progress.failures
                }
                // Exponential, capped, with jitter so that many instances do not reconnect in step.
                let delay = min(Self.maximumBackoff, 0.25 * pow(2, Double(min(failures, 8)))) * Double.random(in: 0.8...1.2)
                try? await Task.sleep(for: .seconds(delay))
            }
        }
    }

    /// One connection, until it ends. `onSubscribed` runs once the upstream accepted the subscriptions.
    private func follow(onSubscribed: @escaping @Sendable () -> Void) async throws {
        let starts = try TaskChange.Kind.allCases.map { kind in
            let start: Map = ["type": "start", "id": .string(kind.rawValue), "payload": ["query": .string(TaskDocuments.subscription(kind))]]
            return String(decoding: try JSONEncoder().encode(start), as: UTF8.self)
        }
        let (changes, logger) = (changes, logger)
        try await UpstreamGraphQLWS.session(url: webSocketURL, bearerToken: try await token()) { message, text, socket in
            switch message.type {
            case "connection_ack":
                for start in starts { try await socket.send(start) }
                logger.info("Following the upstream's task events")
                onSubscribed()
            case "data":
                guard let kind = message.id.flatMap(TaskChange.Kind.init(rawValue:)) else { return true }
                struct DataMessage: Decodable {
                    struct Result: Decodable { let data: [String: TaskItem?]? }
                    let payload: Result
                }
                let decoded = try? JSONDecoder().decode(DataMessage.self, from: Data(text.utf8))
                if let task = decoded?.payload.data?[kind.rawValue] ?? nil {
                    changes.publish(TaskChange(kind: kind, task: task, origin: .upstream))
                } else {
                    logger.warning("Upstream task event without a task: \(text.prefix(200))")
                }
            case "error", "complete":
                // A subscription that ends leaves pages behind: start over on a new connection.
                throw GraphQLUpstreamError.invalidReply("the upstream ended subscription \(message.id ?? "?"): \(text.prefix(200))")
            default:
                break  // "ka"
            }
            return true
        }
    }
}
