import Foundation
import GraphQL
import NIOConcurrencyHelpers
import NIOCore

/// The embedded task service's subscriptions, shared: every subscriber that sends the same document, operation
/// and variables gets the same results, so each result is executed and encoded once, into a LiveChannel, and each
/// subscriber reads it from there on its own operation's task. No task, stream or GraphQL execution per subscriber:
/// one feed per distinct subscription, ended when its last subscriber leaves.
final class SharedSubscriptions: Sendable {
    struct Key: Hashable, Sendable {
        let query: String
        let operationName: String?
        let variables: Data

        init(_ request: GraphQLRequest) throws {
            query = request.query
            operationName = request.operationName
            variables = try Self.encoder.encode(request.variables)
        }

        private static let encoder: JSONEncoder = {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            return encoder
        }()
    }

    /// A subscriber that stops reading for this many results is ended: the socket it writes to is not keeping up.
    static let subscriberBuffer = 256

    final class Feed: Sendable {
        let channel = LiveChannel(limits: .init(window: SharedSubscriptions.subscriberBuffer, maxAge: .seconds(60), subscriberBuffer: SharedSubscriptions.subscriberBuffer))
        let pump = NIOLockedValueBox<Task<Void, Never>?>(nil)
    }

    private let feeds = NIOLockedValueBox<[Key: (feed: Feed, subscribers: Int)]>([:])

    var feedCount: Int { feeds.withLockedValue { $0.count } }

    /// A running feed for `key`, counted as one more subscriber; nil when there is none yet.
    func attach(_ key: Key) -> Feed? {
        feeds.withLockedValue { feeds in
            guard let entry = feeds[key] else { return nil }
            feeds[key] = (entry.feed, entry.subscribers + 1)
            return entry.feed
        }
    }

    /// Starts the feed for `key` from `results` (a subscription just started), or joins the one another subscriber
    /// started meanwhile.
    func install(_ key: Key, results: AsyncThrowingStream<GraphQLResult, any Error>) -> Feed {
        let (feed, isNew) = feeds.withLockedValue { feeds in
            if let entry = feeds[key] {
                feeds[key] = (entry.feed, entry.subscribers + 1)
                return (entry.feed, false)
            }
            let feed = Feed()
            feeds[key] = (feed, 1)
            return (feed, true)
        }
        guard isNew else { return feed }
        feed.pump.withLockedValue { pump in
            pump = Task {
                let encoder = JSONEncoder()
                do {
                    for try await result in results {
                        let bytes = ByteBuffer(bytes: try encoder.encode(result))
                        feed.channel.publish { _ in bytes }
                    }
                } catch {}
                feed.channel.close()
                self.remove(key, feed)
            }
        }
        return feed
    }

    /// One subscriber fewer; the last one out stops the feed.
    func detach(_ key: Key, _ feed: Feed) {
        let last = feeds.withLockedValue { feeds -> Bool in
            guard let entry = feeds[key], entry.feed === feed else { return false }
            if entry.subscribers > 1 {
                feeds[key] = (feed, entry.subscribers - 1)
                return false
            }
            feeds[key] = nil
            return true
        }
        if last { feed.pump.withLockedValue { $0?.cancel() } }
    }

    private func remove(_ key: Key, _ feed: Feed) {
        feeds.withLockedValue { feeds in
            if feeds[key]?.feed === feed { feeds[key] = nil }
        }
    }

    /// One subscriber's view of a feed: the results published after now, read on the consumer's own task.
    func events(of feed: Feed, key: Key) -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        let reader = Reader(feed: feed, key: key, owner: self)
        return AsyncThrowingStream(unfolding: { try await reader.next() })
    }

    /// Its cursor into the feed. Used only by the one task iterating its stream; leaving (the stream released)
    /// detaches it.
    private final class Reader: @unchecked Sendable {
        let feed: Feed
        let key: Key
        let owner: SharedSubscriptions
        var cursor: UInt64
        var pending: ArraySlice<ByteBuffer> = []

        init(feed: Feed, key: Key, owner: SharedSubscriptions) {
            self.feed = feed
            self.key = key
            self.owner = owner
            cursor = feed.channel.latest
        }

        deinit { owner.detach(key, feed) }

        func next() async throws -> SubscriptionEvent? {
            while pending.isEmpty {
                switch await feed.channel.next(after: cursor, maxLag: SharedSubscriptions.subscriberBuffer) {
                case .event(let payload, let sequence):
                    cursor = sequence
                    return .next(payload)
                case .events(let payloads, let through):
                    cursor = through
                    pending = payloads[...]
                case .heartbeat:
                    continue
                case .closed, .cancelled, .ended:
                    return nil
                case .gap, .lagging:
                    throw GraphQLUpstreamError.invalidReply("this subscriber fell more than \(SharedSubscriptions.subscriberBuffer) results behind")
                }
            }
            return .next(pending.removeFirst())
        }
    }
}
