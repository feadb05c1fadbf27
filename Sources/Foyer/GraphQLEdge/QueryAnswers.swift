import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// `--graphql-cache` and `--graphql-cache-scope`.
public struct GraphQLCacheSettings: Sendable, Equatable {
    public enum Scope: String, Sendable, CaseIterable {
        /// An answer serves the user it was fetched for.
        case user
        /// An answer serves every caller: for upstreams that answer everyone alike.
        case shared
    }

    /// How long an answer is kept at most (seconds); nil: nothing is kept (identical queries in flight are still
    /// sent once).
    public var lifetime: TimeInterval?
    public var scope: Scope

    /// On, per user, 30 s: answers that read tasks go the moment any task changes, so the lifetime only bounds
    /// what no feed reports (the schema, a user's rights at the upstream).
    public static let standard = GraphQLCacheSettings(lifetime: 30, scope: .user)

    public init(lifetime: TimeInterval?, scope: Scope) {
        self.lifetime = lifetime
        self.scope = scope
    }
}

/// The answers of queries: identical ones in flight at the same time share one upstream call, and answers are
/// kept until they may have changed. An answer that read tasks is dropped the moment the task feed reports a
/// change (or a gap, or stops), and is neither served nor kept while the feed is down; a mutation through Foyer
/// drops every kept answer before its own answer is returned. Identical means the same request bytes (document,
/// operation name, variables, extensions, as the client encoded them) with the same upstream credentials.
///
/// What a query costs here does not depend on how many answers are kept or how long the query is: the request is
/// known by a digest of its bytes, answers are kept in least-recently-used order, and when the store is full a new
/// answer displaces the least recently used one only if it has been asked for more often (`FrequencySketch`), so
/// a stream of queries never asked twice leaves the kept ones alone instead of churning through them.
final class QueryAnswers: Sendable {
    static let standardMaximumEntries = 10_000
    static let standardMaximumBytes = 64 << 20
    /// Larger answers are passed on but not kept: they would crowd out the common ones.
    static let maximumAnswerBytes = 1 << 20
    /// What an entry costs beyond its answer's bytes: its key, its slot and their bookkeeping.
    static let entryOverhead = 96

    let settings: GraphQLCacheSettings
    let maximumEntries: Int
    let maximumBytes: Int
    private let metrics: FoyerMetrics
    /// False while the feed that reports task changes is down: nothing it would have dropped may be served.
    private let followsTaskChanges: @Sendable () -> Bool
    private let state: NIOLockedValueBox<State>

    init(
        settings: GraphQLCacheSettings, metrics: FoyerMetrics, maximumEntries: Int = standardMaximumEntries,
        maximumBytes: Int = standardMaximumBytes, followsTaskChanges: @escaping @Sendable () -> Bool
    ) {
        self.settings = settings
        self.metrics = metrics
        self.maximumEntries = maximumEntries
        self.maximumBytes = maximumBytes
        self.followsTaskChanges = followsTaskChanges
        state = NIOLockedValueBox(State(sketch: FrequencySketch(expectedKeys: maximumEntries)))
    }

    /// Counters of what may have made answers stale: an answer fetched under older ones is not kept, and a query
    /// does not join a call that began before them.
    private struct Generation: Equatable {
        /// Task changes, gaps and breaks of the feed.
        var tasks = 0
        /// Mutations through Foyer.
        var writes = 0

        func matches(_ other: Generation, readsTasks: Bool) -> Bool {
            writes == other.writes && (!readsTasks || tasks == other.tasks)
        }
    }

    private struct Kept {
        let reply: GraphQLReply
        let readsTasks: Bool
        let expires: UInt64
        let cost: Int
    }

    private struct KeptKey: Hashable {
        /// Nil in the shared scope.
        let caller: Int64?
        let request: RequestDigest

        /// The key as the frequency sketch counts it: the request's digest, told apart by caller.
        var counted: UInt64 {
            caller.map { request.low ^ (UInt64(bitPattern: $0) &* 0x9E37_79B9_7F4A_7C15) } ?? request.low
        }
    }

    private struct FlightKey: Hashable {
        let bearerToken: String?
        let request: RequestDigest
    }

    private struct Flight {
        let id: UInt64
        let generation: Generation
        let readsTasks: Bool
        var waiting: [CheckedContinuation<GraphQLReply, any Error>] = []
    }

    private struct State {
        var generation = Generation()
        var kept = RecencyList<KeptKey, Kept>()
        var bytes = 0
        var sketch: FrequencySketch
        var flights: [FlightKey: Flight] = [:]
        var nextFlight: UInt64 = 0
    }

    /// The call this query joined ended before it could wait for it: look again.
    private struct FlightLanded: Error {}

    /// The answer to a query: kept, shared with an identical call in flight, or fetched by `fetch`.
    func answer(
        _ request: ByteBuffer, readsTasks: Bool, credentials: UpstreamCredentials, fetch: () async throws -> GraphQLReply
    ) async throws -> GraphQLReply {
        let digest = RequestDigest(request)
        let keptKey = settings.lifetime == nil ? nil : keptKey(digest, credentials)
        let flightKey = FlightKey(bearerToken: credentials.bearerToken, request: digest)
        var counted = false
        while true {
            let feedLive = !readsTasks || followsTaskChanges()
            let now = NIODeadline.now().uptimeNanoseconds
            enum Next {
                case answered(GraphQLReply)
                case join(UInt64)
                case lead(UInt64, Generation)
            }
            let next: Next = state.withLockedValue { state in
                if let keptKey {
                    if !counted { state.sketch.increment(keptKey.counted) }
                    if feedLive, let kept = state.kept.use(keptKey) {
                        if kept.expires > now { return .answered(kept.reply) }
                        state.kept.remove(keptKey)
                        state.bytes -= kept.cost
                    }
                }
                if let flight = state.flights[flightKey], flight.generation.matches(state.generation, readsTasks: readsTasks) {
                    return .join(flight.id)
                }
                state.nextFlight += 1
                state.flights[flightKey] = Flight(id: state.nextFlight, generation: state.generation, readsTasks: readsTasks)
                return .lead(state.nextFlight, state.generation)
            }
            counted = true
            switch next {
            case .answered(let reply):
                metrics.graphQLCache(.hit)
                return reply
            case .join(let id):
                if keptKey != nil { metrics.graphQLCache(.miss) }
                do {
                    let reply = try await withCheckedThrowingContinuation { continuation in
                        let joined = state.withLockedValue { state in
                            guard state.flights[flightKey]?.id == id else { return false }
                            state.flights[flightKey]?.waiting.append(continuation)
                            return true
                        }
                        if !joined { continuation.resume(throwing: FlightLanded()) }
                    }
                    metrics.graphQLDeduplicated.increment()
                    return reply
                } catch is FlightLanded {
                    continue
                } catch is CancellationError where !Task.isCancelled {
                    // The caller that led the call went away; this one did not.
                    continue
                }
            case .lead(let id, let generation):
                if keptKey != nil { metrics.graphQLCache(.miss) }
                let started = NIODeadline.now().uptimeNanoseconds
                let result: Result<GraphQLReply, any Error>
                do {
                    result = .success(try await fetch())
                } catch {
                    result = .failure(error)
                }
                let waiting = state.withLockedValue { state -> [CheckedContinuation<GraphQLReply, any Error>] in
                    guard let flight = state.flights[flightKey], flight.id == id else { return [] }
                    state.flights[flightKey] = nil
                    return flight.waiting
                }
                if let keptKey, let lifetime = settings.lifetime, case .success(let reply) = result, Self.isKeepable(reply) {
                    keep(reply, for: keptKey, readsTasks: readsTasks, generation: generation, expires: started + UInt64(lifetime * 1e9))
                }
                for continuation in waiting { continuation.resume(with: result) }
                return try result.get()
            }
        }
    }

    /// The kept answer to exactly these request bytes, if one may be served now; nil otherwise (nothing is fetched,
    /// and a request that finds nothing is counted when it is asked for with `answer`). Only a query's answer is
    /// ever kept, so bytes that have one are a query that was admitted before.
    func kept(_ request: ByteBuffer, credentials: UpstreamCredentials) -> GraphQLReply? {
        guard settings.lifetime != nil, let key = keptKey(RequestDigest(request), credentials) else { return nil }
        let now = NIODeadline.now().uptimeNanoseconds
        let kept: Kept? = state.withLockedValue { state in
            guard let kept = state.kept.use(key), kept.expires > now else { return nil }
            state.sketch.increment(key.counted)
            return kept
        }
        guard let kept, !kept.readsTasks || followsTaskChanges() else { return nil }
        metrics.graphQLCache(.hit)
        return kept.reply
    }

    private func keptKey(_ request: RequestDigest, _ credentials: UpstreamCredentials) -> KeptKey? {
        switch settings.scope {
        case .shared: return KeptKey(caller: nil, request: request)
        case .user: return credentials.userID.map { KeptKey(caller: $0, request: request) }
        }
    }

    private func keep(_ reply: GraphQLReply, for key: KeptKey, readsTasks: Bool, generation: Generation, expires: UInt64) {
        let cost = reply.body.readableBytes + Self.entryOverhead
        guard cost <= Self.maximumAnswerBytes, !readsTasks || followsTaskChanges() else { return }
        let now = NIODeadline.now().uptimeNanoseconds
        let (admitted, evicted) = state.withLockedValue { state -> (Bool, Int) in
            // Something that may have changed it happened while it was being fetched.
            guard generation.matches(state.generation, readsTasks: readsTasks) else { return (false, 0) }
            if let previous = state.kept.remove(key) { state.bytes -= previous.cost }
            var evicted = 0
            if state.kept.count >= maximumEntries || state.bytes + cost > maximumBytes, let victim = state.kept.leastRecentlyUsed,
                victim.value.expires > now, state.sketch.estimate(key.counted) <= state.sketch.estimate(victim.key.counted)
            {
                // Full, and what would make room for it has been asked for as often at least.
                return (false, 0)
            }
            while state.kept.count >= maximumEntries || state.bytes + cost > maximumBytes, let victim = state.kept.removeLeastRecentlyUsed() {
                state.bytes -= victim.value.cost
                evicted += 1
            }
            state.kept.insert(Kept(reply: reply, readsTasks: readsTasks, expires: expires, cost: cost), for: key)
            state.bytes += cost
            return (true, evicted)
        }
        if !admitted { metrics.graphQLCache(.notAdmitted) }
        if evicted > 0 { metrics.graphQLCache(.evicted, by: evicted) }
    }

    /// An answer is kept only when the query ran and every part of it was answered: `200` and no `errors`.
    static func isKeepable(_ reply: GraphQLReply) -> Bool {
        guard reply.status == .ok else { return false }
        // memchr and memcmp: the generic search was nearly 1 % of a proxied request.
        return reply.body.withUnsafeReadableBytes { body in
            errorsKey.withUnsafeBytes { key in
                guard let start = body.baseAddress, let keyStart = key.baseAddress else { return true }
                var offset = 0
                while body.count - offset >= key.count, let quote = memchr(start + offset, Int32(key[0]), body.count - offset - key.count + 1) {
                    if memcmp(quote, keyStart, key.count) == 0 { return false }
                    offset = start.distance(to: UnsafeRawPointer(quote)) + 1
                }
                return true
            }
        }
    }

    private static let errorsKey = Array(#""errors""#.utf8)

    /// A task changed (anyone's, anywhere), the feed missed some, or it stopped or started again.
    func tasksMayHaveChanged() {
        drop { generation in generation.tasks += 1 } where: { $0.readsTasks }
    }

    /// A mutation through Foyer answered: whatever it changed must not be read stale by anyone, its author first.
    func written() {
        drop { generation in generation.writes += 1 } where: { _ in true }
    }

    private func drop(_ advance: (inout Generation) -> Void, where isStale: (Kept) -> Bool) {
        let dropped = state.withLockedValue { state -> Int in
            advance(&state.generation)
            // One pass to find them: every mutation and task change comes here, with up to 10,000 answers kept.
            let stale = state.kept.removeAll(where: isStale)
            state.bytes -= stale.reduce(0) { $0 + $1.cost }
            return stale.count
        }
        if dropped > 0 { metrics.graphQLCache(.invalidated, by: dropped) }
    }

    var keptCount: Int { state.withLockedValue { $0.kept.count } }
    var keptBytes: Int { state.withLockedValue { $0.bytes } }
    /// Queries waiting for an identical call in flight.
    var joinedCount: Int { state.withLockedValue { $0.flights.values.reduce(0) { $0 + $1.waiting.count } } }
}

/// A request's bytes known by 128 bits of their SHA-256: a key of fixed size, hashed and compared at once however
/// long the request. (A collision would serve one query another's answer; SHA-256's 128 bits make that as likely as
/// guessing a random 128-bit secret, whatever bytes a client sends.)
struct RequestDigest: Hashable, Sendable {
    let high: UInt64
    let low: UInt64

    init(_ bytes: ByteBuffer) {
        let digest = bytes.withUnsafeReadableBytes { SHA256.hash(data: $0) }
        (high, low) = digest.withUnsafeBytes { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
    }
}
