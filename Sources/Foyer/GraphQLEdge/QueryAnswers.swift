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
final class QueryAnswers: Sendable {
    static let maximumEntries = 10_000
    static let maximumBytes = 64 << 20
    /// Larger answers are passed on but not kept: they would crowd out the common ones.
    static let maximumAnswerBytes = 1 << 20

    let settings: GraphQLCacheSettings
    private let metrics: FoyerMetrics
    /// False while the feed that reports task changes is down: nothing it would have dropped may be served.
    private let followsTaskChanges: @Sendable () -> Bool
    private let state = NIOLockedValueBox(State())

    init(settings: GraphQLCacheSettings, metrics: FoyerMetrics, followsTaskChanges: @escaping @Sendable () -> Bool) {
        self.settings = settings
        self.metrics = metrics
        self.followsTaskChanges = followsTaskChanges
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
        let request: ByteBuffer
    }

    private struct FlightKey: Hashable {
        let bearerToken: String?
        let request: ByteBuffer
    }

    private struct Flight {
        let id: UInt64
        let generation: Generation
        let readsTasks: Bool
        var waiting: [CheckedContinuation<GraphQLReply, any Error>] = []
    }

    private struct State {
        var generation = Generation()
        var kept: [KeptKey: Kept] = [:]
        var bytes = 0
        var flights: [FlightKey: Flight] = [:]
        var nextFlight: UInt64 = 0
    }

    /// The call this query joined ended before it could wait for it: look again.
    private struct FlightLanded: Error {}

    /// The answer to a query: kept, shared with an identical call in flight, or fetched by `fetch`.
    func answer(
        _ request: ByteBuffer, readsTasks: Bool, credentials: UpstreamCredentials, fetch: () async throws -> GraphQLReply
    ) async throws -> GraphQLReply {
        let keptKey = settings.lifetime == nil ? nil : keptKey(request, credentials)
        let flightKey = FlightKey(bearerToken: credentials.bearerToken, request: request)
        while true {
            let feedLive = !readsTasks || followsTaskChanges()
            let now = NIODeadline.now().uptimeNanoseconds
            enum Next {
                case answered(GraphQLReply)
                case join(UInt64)
                case lead(UInt64, Generation)
            }
            let next: Next = state.withLockedValue { state in
                if let keptKey, feedLive, let kept = state.kept[keptKey] {
                    if kept.expires > now { return .answered(kept.reply) }
                    state.kept[keptKey] = nil
                    state.bytes -= kept.cost
                }
                if let flight = state.flights[flightKey], flight.generation.matches(state.generation, readsTasks: readsTasks) {
                    return .join(flight.id)
                }
                state.nextFlight += 1
                state.flights[flightKey] = Flight(id: state.nextFlight, generation: state.generation, readsTasks: readsTasks)
                return .lead(state.nextFlight, state.generation)
            }
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

    /// The kept answer to exactly these request bytes, if one may be served now; nil otherwise (nothing is fetched).
    /// Only a query's answer is ever kept, so bytes that have one are a query that was admitted before.
    func kept(_ request: ByteBuffer, credentials: UpstreamCredentials) -> GraphQLReply? {
        guard settings.lifetime != nil, let key = keptKey(request, credentials) else { return nil }
        let now = NIODeadline.now().uptimeNanoseconds
        guard let kept = state.withLockedValue({ $0.kept[key] }), kept.expires > now, !kept.readsTasks || followsTaskChanges() else { return nil }
        metrics.graphQLCache(.hit)
        return kept.reply
    }

    private func keptKey(_ request: ByteBuffer, _ credentials: UpstreamCredentials) -> KeptKey? {
        switch settings.scope {
        case .shared: return KeptKey(caller: nil, request: request)
        case .user: return credentials.userID.map { KeptKey(caller: $0, request: request) }
        }
    }

    private func keep(_ reply: GraphQLReply, for key: KeptKey, readsTasks: Bool, generation: Generation, expires: UInt64) {
        let cost = reply.body.readableBytes + key.request.readableBytes + 64
        guard cost <= Self.maximumAnswerBytes, !readsTasks || followsTaskChanges() else { return }
        state.withLockedValue { state in
            // Something that may have changed it happened while it was being fetched.
            guard generation.matches(state.generation, readsTasks: readsTasks) else { return }
            if let previous = state.kept.removeValue(forKey: key) { state.bytes -= previous.cost }
            if state.kept.count >= Self.maximumEntries || state.bytes + cost > Self.maximumBytes {
                Self.makeRoom(&state, for: cost)
            }
            state.kept[key] = Kept(reply: reply, readsTasks: readsTasks, expires: expires, cost: cost)
            state.bytes += cost
        }
    }

    /// Expired answers go first; if that is not enough, any, until a quarter of the room is free.
    private static func makeRoom(_ state: inout State, for cost: Int) {
        let now = NIODeadline.now().uptimeNanoseconds
        state.kept = state.kept.filter { $0.value.expires > now }
        state.bytes = state.kept.values.reduce(0) { $0 + $1.cost }
        let (entryGoal, byteGoal) = (maximumEntries * 3 / 4, maximumBytes * 3 / 4 - cost)
        while state.kept.count > entryGoal || state.bytes > byteGoal, let victim = state.kept.first {
            state.kept.remove(at: state.kept.startIndex)
            state.bytes -= victim.value.cost
        }
    }

    /// An answer is kept only when the query ran and every part of it was answered: `200` and no `errors`.
    static func isKeepable(_ reply: GraphQLReply) -> Bool {
        reply.status == .ok && !reply.body.readableBytesView.contains(subsequence: errorsKey)
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
            let stale = state.kept.filter { isStale($0.value) }
            for (key, kept) in stale {
                state.kept[key] = nil
                state.bytes -= kept.cost
            }
            return stale.count
        }
        if dropped > 0 { metrics.graphQLCache(.invalidated, by: dropped) }
    }

    var keptCount: Int { state.withLockedValue { $0.kept.count } }
    /// Queries waiting for an identical call in flight.
    var joinedCount: Int { state.withLockedValue { $0.flights.values.reduce(0) { $0 + $1.waiting.count } } }
}

extension Collection where Element == UInt8 {
    fileprivate func contains(subsequence: [UInt8]) -> Bool {
        guard let first = subsequence.first, count >= subsequence.count else { return false }
        var index = startIndex
        while let found = self[index...].firstIndex(of: first) {
            if self[found...].starts(with: subsequence) { return true }
            index = self.index(after: found)
        }
        return false
    }
}
