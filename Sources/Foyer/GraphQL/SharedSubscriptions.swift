import Foundation
import GraphQL
import NIOConcurrencyHelpers
import NIOCore

/// The embedded task service's subscriptions, shared: every subscriber that sends the same document, operation
/// and variables gets the same results, so each result is executed and encoded once, into a LiveChannel. A socket
/// follows it from its event loop (`Membership.follow`); other consumers read it on their own task (`events`). No
/// GraphQL execution per subscriber: one feed per distinct subscription, ended when its last subscriber leaves.
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

    /// How a shared subscription starts: refused (a JSON array of GraphQL errors), or joined.
    enum Start: Sendable {
        case refused(ByteBuffer)
        case joined(Membership)
    }

    /// One subscriber's place in a feed, from the result after it joined. Released, it leaves the feed.
    final class Membership: Sendable {
        let feed: Feed
        let key: Key
        let owner: SharedSubscriptions
        /// The last result before this subscriber joined.
        let joinedAfter: UInt64

        fileprivate init(feed: Feed, key: Key, owner: SharedSubscriptions) {
            self.feed = feed
            self.key = key
            self.owner = owner
            joinedAfter = feed.channel.latest
        }

        deinit { owner.detach(key, feed) }

        /// Writes each result to `connection` with `write` (and `flush`), framed by `framing`, from the connection's
        /// event loop, until the feed ends (`.closed`), the connection closes or falls behind, or `stop`; then calls
        /// `ended` there. Gives the number that stops it. The membership lasts as long as the following.
        func follow(
            on connection: any Channel, write: @escaping @Sendable (ByteBuffer) -> Void, flush: @escaping @Sendable () -> Void,
            framing: LiveChannel.Connection.Framing, ended: @escaping @Sendable (LiveChannel.Ending) -> Void
        ) -> UInt64 {
            let channel = feed.channel
            let subscriber = channel.subscribe()
            let following = LiveChannel.Connection(channel: connection, write: write, flush: flush, heartbeat: nil, framing: framing)
            channel.follow(following, after: joinedAfter, subscriber: subscriber) { ending in
                channel.unsubscribe(subscriber)
                withExtendedLifetime(self) { ended(ending) }
            }
            return subscriber
        }

        /// Stops the following `follow` gave `subscriber` to, on `eventLoop`, the connection's.
        func stop(_ subscriber: UInt64, on eventLoop: any EventLoop) {
            feed.channel.stop(subscriber: subscriber, on: eventLoop, .cancelled)
        }
    }

    private let feeds = NIOLockedValueBox<[Key: (feed: Feed, subscribers: Int)]>([:])

    var feedCount: Int { feeds.withLockedValue { $0.count } }

    /// A place in the running feed for `key`; nil when there is none yet.
    func attach(_ key: Key) -> Membership? {
        let feed = feeds.withLockedValue { feeds -> Feed? in
            guard let entry = feeds[key] else { return nil }
            feeds[key] = (entry.feed, entry.subscribers + 1)
            return entry.feed
        }
        return feed.map { Membership(feed: $0, key: key, owner: self) }
    }

    /// Starts the feed for `key` from `results` (a subscription just started), or joins the one another subscriber
    /// started meanwhile.
    func install(_ key: Key, results: AsyncThrowingStream<GraphQLResult, any Error>) -> Membership {
        let (feed, isNew) = feeds.withLockedValue { feeds in
            if let entry = feeds[key] {
                feeds[key] = (entry.feed, entry.subscribers + 1)
                return (entry.feed, false)
            }
            let feed = Feed()
            feeds[key] = (feed, 1)
            return (feed, true)
        }
        let membership = Membership(feed: feed, key: key, owner: self)
        guard isNew else { return membership }
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
        return membership
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

    /// One subscriber's results, read on the consumer's own task.
    func events(of membership: Membership) -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        let reader = Reader(membership: membership)
        return AsyncThrowingStream(unfolding: { try await reader.next() })
    }

    /// Its cursor into the feed. Used only by the one task iterating its stream; leaving (the stream released)
    /// releases the membership.
    private final class Reader: @unchecked Sendable {
        let membership: Membership
        var cursor: UInt64
        var pending: ArraySlice<ByteBuffer> = []

        init(membership: Membership) {
            self.membership = membership
            cursor = membership.joinedAfter
        }

        func next() async throws -> SubscriptionEvent? {
            while pending.isEmpty {
                switch await membership.feed.channel.next(after: cursor, maxLag: SharedSubscriptions.subscriberBuffer) {
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
