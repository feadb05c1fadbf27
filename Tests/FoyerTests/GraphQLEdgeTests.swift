import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import Foyer

@Suite struct GraphQLRateLimitTests {
    @Test func parsesWhatTheFlagAccepts() throws {
        #expect(try GraphQLRateLimit.parse("300/min").get() == GraphQLRateLimit(operations: 300, window: 60))
        #expect(try GraphQLRateLimit.parse(" 20/S ").get() == GraphQLRateLimit(operations: 20, window: 1))
        #expect(try GraphQLRateLimit.parse("5000/h").get() == GraphQLRateLimit(operations: 5000, window: 3600))
        #expect(try GraphQLRateLimit.parse("off").get() == nil)
        #expect(try GraphQLRateLimit.parse("1/s").get() == GraphQLRateLimit(operations: 1, window: 1))
        for invalid in ["0/min", "-3/min", "300", "300/day", "many/min", "", "300/min/s"] {
            #expect(throws: GraphQLRateLimit.Invalid.self, "\(invalid)") { try GraphQLRateLimit.parse(invalid).get() }
        }
        #expect(GraphQLRateLimit.standard.description == "600/m")
        #expect(try GraphQLRateLimit.parse(GraphQLRateLimit.standard.description).get() == .standard)
    }

    @Test func aCallerGetsTheQuotaAndNotOneMoreUntilItRefills() throws {
        let limit = CallerRateLimit(GraphQLRateLimit(operations: 3, window: 60), metrics: FoyerMetrics())
        let start: UInt64 = 1_000_000_000_000
        for left in [2, 1, 0] {
            #expect(try limit.take(caller: 1, now: start).remaining == left)
        }
        let refusal = try #require(throws: GraphQLRefusal.self) { try limit.take(caller: 1, now: start) }
        #expect(refusal.status == .tooManyRequests)
        #expect(refusal.code == "RATE_LIMITED")
        // One operation comes back every 20 s.
        #expect(refusal.headers[.retryAfter] == "20")
        #expect(refusal.headers[.rateLimitPolicy] == "\"graphql\";q=3;w=60")
        #expect(refusal.headers[.rateLimit] == "\"graphql\";r=0;t=60")

        // Another caller has a quota of their own.
        #expect(try limit.take(caller: 2, now: start).remaining == 2)

        // Just short of 20 s nothing is back; at 20 s one operation is.
        #expect(throws: GraphQLRefusal.self) { try limit.take(caller: 1, now: start + 19_900_000_000) }
        #expect(try limit.take(caller: 1, now: start + 20_000_000_000).remaining == 0)
    }

    @Test func aBatchTakesOneOperationForEachMemberOrNone() throws {
        let limit = CallerRateLimit(GraphQLRateLimit(operations: 3, window: 60), metrics: FoyerMetrics())
        let now: UInt64 = 5_000_000_000
        #expect(try limit.take(2, caller: 7, now: now).remaining == 1)
        #expect(throws: GraphQLRefusal.self) { try limit.take(2, caller: 7, now: now) }
        // The refused batch took nothing: the one left is still there.
        #expect(try limit.take(1, caller: 7, now: now).remaining == 0)
    }
}

/// `QueryAnswers` on its own, with a fetch that counts its calls and can be held until released.
@Suite struct QueryAnswersTests {
    final class Upstream: Sendable {
        let calls = NIOLockedValueBox(0)
        let held = NIOLockedValueBox<[CheckedContinuation<Void, Never>]>([])
        let holding: Bool
        let reply: String

        init(holding: Bool = false, reply: String = #"{"data":{"allTasks":[]}}"#) {
            self.holding = holding
            self.reply = reply
        }

        var count: Int { calls.withLockedValue { $0 } }

        func fetch() async -> GraphQLReply {
            let call = calls.withLockedValue { calls in
                calls += 1
                return calls
            }
            if holding { await withCheckedContinuation { continuation in held.withLockedValue { $0.append(continuation) } } }
            return GraphQLReply(status: .ok, body: ByteBuffer(string: reply.replacingOccurrences(of: "CALL", with: String(call))))
        }

        func release() {
            for continuation in held.withLockedValue({ held in defer { held = [] }; return held }) { continuation.resume() }
        }
    }

    static let allTasks = ByteBuffer(string: #"{"query":"{ allTasks { id } }"}"#)
    static let ada = UpstreamCredentials(bearerToken: "shared-token", userID: 1)
    static let bob = UpstreamCredentials(bearerToken: "shared-token", userID: 2)

    func answers(_ settings: GraphQLCacheSettings = .standard, feed: NIOLockedValueBox<Bool> = NIOLockedValueBox(true)) -> QueryAnswers {
        QueryAnswers(settings: settings, metrics: FoyerMetrics()) { feed.withLockedValue { $0 } }
    }

    func ask(_ answers: QueryAnswers, _ upstream: Upstream, _ request: ByteBuffer = allTasks, readsTasks: Bool = true, as caller: UpstreamCredentials = ada) async throws -> String {
        let reply = try await answers.answer(request, readsTasks: readsTasks, credentials: caller) { await upstream.fetch() }
        return String(buffer: reply.body)
    }

    @Test(arguments: [GraphQLCacheSettings.standard, GraphQLCacheSettings(lifetime: nil, scope: .user)])
    func identicalQueriesInFlightShareOneCall(settings: GraphQLCacheSettings) async throws {
        let (answers, upstream) = (answers(settings), Upstream(holding: true, reply: #"{"data":{"call":CALL}}"#))
        let replies = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<8 { group.addTask { try await ask(answers, upstream) } }
            // Released once the first is upstream and the seven others wait for it.
            try await eventually { upstream.count == 1 && answers.joinedCount == 7 }
            upstream.release()
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(upstream.count == 1)
        #expect(replies == Array(repeating: #"{"data":{"call":1}}"#, count: 8))
    }

    @Test func differentQueriesInFlightEachMakeTheirOwnCall() async throws {
        let (answers, upstream) = (answers(), Upstream(holding: true))
        try await withThrowingTaskGroup(of: String.self) { group in
            for number in 0..<8 {
                group.addTask { try await ask(answers, upstream, ByteBuffer(string: #"{"query":"{ getTask(id: \"\#(number)\") { id } }"}"#)) }
            }
            try await eventually { upstream.count == 8 }
            upstream.release()
            try await group.waitForAll()
        }
        #expect(upstream.count == 8)
        #expect(answers.joinedCount == 0)
    }

    @Test func aKeptAnswerIsServedAgainOnlyWhenTheCacheIsOn() async throws {
        let (kept, keptUpstream) = (answers(), Upstream())
        _ = try await ask(kept, keptUpstream)
        _ = try await ask(kept, keptUpstream)
        #expect(keptUpstream.count == 1)

        let (off, offUpstream) = (answers(GraphQLCacheSettings(lifetime: nil, scope: .user)), Upstream())
        _ = try await ask(off, offUpstream)
        _ = try await ask(off, offUpstream)
        #expect(offUpstream.count == 2)
        #expect(off.keptCount == 0)
    }

    @Test func anAnswerOutlivesItsLifetimeNever() async throws {
        let (answers, upstream) = (answers(GraphQLCacheSettings(lifetime: 0.05, scope: .user)), Upstream())
        let clock = ContinuousClock()
        let first = clock.now
        _ = try await ask(answers, upstream)
        _ = try await ask(answers, upstream)
        // Asked again within its lifetime it was kept (the second call ran well inside 50 ms on any machine that runs
        // this suite; if not, say so rather than pass or fail for the wrong reason).
        if clock.now - first < .milliseconds(40) { #expect(upstream.count == 1) }
        try await eventually {
            _ = try await ask(answers, upstream)
            return upstream.count >= 2
        }
        #expect(clock.now - first >= .milliseconds(50))
    }

    @Test func answersWithErrorsAreNotKept() async throws {
        let (answers, upstream) = (answers(), Upstream(reply: #"{"data":{"getTask":null},"errors":[{"message":"nope"}]}"#))
        _ = try await ask(answers, upstream)
        _ = try await ask(answers, upstream)
        #expect(upstream.count == 2)
        #expect(answers.keptCount == 0)
        #expect(!QueryAnswers.isKeepable(GraphQLReply(status: .badGateway, body: ByteBuffer(string: #"{"data":{}}"#))))
        #expect(QueryAnswers.isKeepable(GraphQLReply(status: .ok, body: ByteBuffer(string: #"{"data":{"title":"no errors here"}}"#))))
    }

    @Test func aUsersAnswerServesOnlyThemUnlessShared() async throws {
        let (perUser, perUserUpstream) = (answers(), Upstream())
        _ = try await ask(perUser, perUserUpstream, as: Self.ada)
        _ = try await ask(perUser, perUserUpstream, as: Self.bob)
        _ = try await ask(perUser, perUserUpstream, as: Self.ada)
        _ = try await ask(perUser, perUserUpstream, as: Self.bob)
        #expect(perUserUpstream.count == 2)

        let (shared, sharedUpstream) = (answers(GraphQLCacheSettings(lifetime: 30, scope: .shared)), Upstream())
        _ = try await ask(shared, sharedUpstream, as: Self.ada)
        _ = try await ask(shared, sharedUpstream, as: Self.bob)
        #expect(sharedUpstream.count == 1)
    }

    @Test func aTaskChangeDropsWhatReadTasksAndAMutationDropsEverything() async throws {
        let (answers, upstream) = (answers(), Upstream())
        let schema = ByteBuffer(string: #"{"query":"{ __schema { queryType { name } } }"}"#)
        _ = try await ask(answers, upstream)
        _ = try await ask(answers, upstream, schema, readsTasks: false)
        #expect(answers.keptCount == 2)

        answers.tasksMayHaveChanged()
        #expect(answers.keptCount == 1)
        _ = try await ask(answers, upstream, schema, readsTasks: false)
        #expect(upstream.count == 2, "the schema's answer was still kept")
        _ = try await ask(answers, upstream)
        #expect(upstream.count == 3, "the tasks' answer was asked again")

        answers.written()
        #expect(answers.keptCount == 0)
    }

    @Test func anAnswerFetchedWhileTasksChangedIsNotKept() async throws {
        let (answers, upstream) = (answers(), Upstream(holding: true))
        async let first = ask(answers, upstream)
        try await eventually { upstream.count == 1 }
        answers.tasksMayHaveChanged()
        upstream.release()
        _ = try await first
        #expect(answers.keptCount == 0)
    }

    @Test func aQueryDoesNotJoinACallThatBeganBeforeAMutation() async throws {
        let (answers, upstream) = (answers(), Upstream(holding: true))
        async let before = ask(answers, upstream)
        try await eventually { upstream.count == 1 }
        answers.written()
        async let after = ask(answers, upstream)
        try await eventually { upstream.count == 2 }
        upstream.release()
        _ = try await (before, after)
        #expect(answers.joinedCount == 0)
    }

    @Test func whileTheFeedIsDownNothingItWouldDropIsServedOrKept() async throws {
        let feed = NIOLockedValueBox(true)
        let (answers, upstream) = (answers(feed: feed), Upstream())
        let schema = ByteBuffer(string: #"{"query":"{ __type(name: \"Task\") { name } }"}"#)
        _ = try await ask(answers, upstream)
        _ = try await ask(answers, upstream, schema, readsTasks: false)
        #expect(upstream.count == 2)

        feed.withLockedValue { $0 = false }
        _ = try await ask(answers, upstream)
        _ = try await ask(answers, upstream)
        #expect(upstream.count == 4, "tasks are asked upstream every time")
        _ = try await ask(answers, upstream, schema, readsTasks: false)
        #expect(upstream.count == 4, "what no feed covers is still served")

        // As the feed does when it follows again: what was kept before may be stale.
        feed.withLockedValue { $0 = true }
        answers.tasksMayHaveChanged()
        _ = try await ask(answers, upstream)
        _ = try await ask(answers, upstream)
        #expect(upstream.count == 5)
    }

    @Test func readsTasksUnlessOnlyTheSchemaIsRead() {
        #expect(QueryAnalysis(query: "{ allTasks { id } }").kind(named: nil) == .query(readsTasks: true))
        #expect(QueryAnalysis(query: "query Q { __schema { types { name } } }").kind(named: "Q") == .query(readsTasks: false))
        #expect(QueryAnalysis(query: "{ __typename }").kind(named: nil) == .query(readsTasks: false))
        #expect(QueryAnalysis(query: "query { ...F } fragment F on Query { __typename getTask(id: 1) { id } }").kind(named: nil) == .query(readsTasks: true))
        #expect(QueryAnalysis(query: "mutation { deleteTask(id: 1) }").kind(named: nil) == .mutation)
        #expect(QueryAnalysis(query: "subscription { taskAdded { id } }").kind(named: nil) == .other)
        #expect(QueryAnalysis(query: "{ unclosed").kind(named: nil) == .other)
    }
}

/// The kept-answer store's order, bounds and admission, through `QueryAnswers` with small bounds.
@Suite struct KeptAnswerStoreTests {
    typealias Upstream = QueryAnswersTests.Upstream

    static func query(_ number: Int) -> ByteBuffer {
        ByteBuffer(string: #"{"query":"{ getTask(id: \"\#(number)\") { id } }"}"#)
    }

    func store(entries: Int = 10, bytes: Int = 1 << 20, scope: GraphQLCacheSettings.Scope = .user) -> QueryAnswers {
        QueryAnswers(settings: GraphQLCacheSettings(lifetime: 30, scope: scope), metrics: FoyerMetrics(), maximumEntries: entries, maximumBytes: bytes) { true }
    }

    /// Asks query `number` once; true when the upstream was asked for it.
    func fetched(_ answers: QueryAnswers, _ upstream: Upstream, _ number: Int, as caller: UpstreamCredentials = QueryAnswersTests.ada) async throws -> Bool {
        let before = upstream.count
        _ = try await answers.answer(Self.query(number), readsTasks: true, credentials: caller) { await upstream.fetch() }
        return upstream.count > before
    }

    @Test func theLeastRecentlyUsedAnswerMakesRoomNotTheOldest() async throws {
        let (answers, upstream) = (store(entries: 3), Upstream())
        for number in 1...3 { #expect(try await fetched(answers, upstream, number)) }
        #expect(try await !fetched(answers, upstream, 1), "kept while there was room")
        // 4 is asked for twice, more than 2 (least recently used now; 1 is older but was used since).
        #expect(try await fetched(answers, upstream, 4))
        #expect(try await fetched(answers, upstream, 4))
        #expect(answers.keptCount == 3)
        #expect(try await !fetched(answers, upstream, 1))
        #expect(try await !fetched(answers, upstream, 3))
        #expect(try await !fetched(answers, upstream, 4))
        #expect(try await fetched(answers, upstream, 2), "the least recently used made room")
    }

    @Test func aFullStoreTakesANewAnswerOnlyWhenAskedForMoreOftenThanWhatItDisplaces() async throws {
        let (answers, upstream) = (store(entries: 2), Upstream())
        // With room, an answer is kept the first time.
        #expect(try await fetched(answers, upstream, 1))
        #expect(try await fetched(answers, upstream, 2))
        #expect(answers.keptCount == 2)
        // Full: asked once, as often as the least recently used (1), it is passed on and not kept.
        #expect(try await fetched(answers, upstream, 3))
        #expect(try await fetched(answers, upstream, 3), "asked once was not enough")
        // Asked twice it was kept, displacing 1.
        #expect(try await !fetched(answers, upstream, 3))
        #expect(try await fetched(answers, upstream, 1))
        #expect(answers.keptCount == 2)

        // As often as the one it would displace is not enough either.
        let (again, againUpstream) = (store(entries: 1), Upstream())
        #expect(try await fetched(again, againUpstream, 1))
        #expect(try await !fetched(again, againUpstream, 1))
        #expect(try await fetched(again, againUpstream, 2))
        #expect(try await fetched(again, againUpstream, 2), "twice, as often as 1: not kept")
        #expect(try await fetched(again, againUpstream, 2), "three times, more often than 1: kept now")
        #expect(try await !fetched(again, againUpstream, 2))
        #expect(try await fetched(again, againUpstream, 1))
    }

    @Test func bytesAreCountedPerAnswerAndBoundTheStore() async throws {
        let reply = #"{"data":{"getTask":{"id":"1"}}}"#
        let cost = reply.utf8.count + QueryAnswers.entryOverhead
        // Room for two answers by bytes (one byte short of three), many by count.
        let (answers, upstream) = (store(entries: 100, bytes: 3 * cost - 1), Upstream(reply: reply))
        #expect(try await fetched(answers, upstream, 1))
        #expect(answers.keptBytes == cost)
        #expect(try await fetched(answers, upstream, 2))
        #expect(answers.keptBytes == 2 * cost)
        #expect(try await fetched(answers, upstream, 3))
        #expect(answers.keptCount == 2, "a third would pass the bytes")
        #expect(try await fetched(answers, upstream, 3))
        #expect(answers.keptCount == 2)
        #expect(answers.keptBytes == 2 * cost)
        #expect(try await fetched(answers, upstream, 1), "the least recently used made room by bytes")

        answers.tasksMayHaveChanged()
        #expect(answers.keptCount == 0)
        #expect(answers.keptBytes == 0)
    }

    @Test func twoCallersAndTheSharedScopeAreKeptApart() async throws {
        let (perUser, perUserUpstream) = (store(), Upstream(reply: #"{"data":{"call":CALL}}"#))
        func reply(_ answers: QueryAnswers, _ upstream: Upstream, as caller: UpstreamCredentials) async throws -> String {
            String(buffer: try await answers.answer(Self.query(1), readsTasks: true, credentials: caller) { await upstream.fetch() }.body)
        }
        #expect(try await reply(perUser, perUserUpstream, as: QueryAnswersTests.ada) == #"{"data":{"call":1}}"#)
        #expect(try await reply(perUser, perUserUpstream, as: QueryAnswersTests.bob) == #"{"data":{"call":2}}"#)
        #expect(try await reply(perUser, perUserUpstream, as: QueryAnswersTests.ada) == #"{"data":{"call":1}}"#)
        #expect(try await reply(perUser, perUserUpstream, as: QueryAnswersTests.bob) == #"{"data":{"call":2}}"#)
        #expect(perUser.keptCount == 2)
        // No user, no answer kept for them (and none served).
        let nobody = UpstreamCredentials(bearerToken: "shared-token", userID: nil)
        #expect(try await reply(perUser, perUserUpstream, as: nobody) == #"{"data":{"call":3}}"#)
        #expect(try await reply(perUser, perUserUpstream, as: nobody) == #"{"data":{"call":4}}"#)
        #expect(perUser.keptCount == 2)

        let (shared, sharedUpstream) = (store(scope: .shared), Upstream(reply: #"{"data":{"call":CALL}}"#))
        #expect(try await reply(shared, sharedUpstream, as: QueryAnswersTests.ada) == #"{"data":{"call":1}}"#)
        #expect(try await reply(shared, sharedUpstream, as: QueryAnswersTests.bob) == #"{"data":{"call":1}}"#)
        #expect(try await reply(shared, sharedUpstream, as: nobody) == #"{"data":{"call":1}}"#)
        #expect(shared.keptCount == 1)
    }

    @Test func theRecencyListKeepsItsOrderThroughUseRemovalAndReuse() {
        var list = RecencyList<String, Int>()
        for (number, key) in ["a", "b", "c", "d"].enumerated() { list.insert(number, for: key) }
        #expect(list.keysByRecency == ["a", "b", "c", "d"])
        #expect(list.use("b") == 1)
        #expect(list.keysByRecency == ["a", "c", "d", "b"])
        #expect(list.remove("c") == 2)
        #expect(list.insert(9, for: "e") == nil, "a freed slot is used again")
        #expect(list.insert(7, for: "a") == 0)
        #expect(list.keysByRecency == ["d", "b", "e", "a"])
        #expect(list.removeLeastRecentlyUsed()?.key == "d")
        #expect(list.removeAll { $0 > 5 } == [9, 7])
        #expect(list.keysByRecency == ["b"])
        #expect(list.leastRecentlyUsed?.value == 1)
        #expect(list.removeLeastRecentlyUsed()?.key == "b")
        #expect(list.isEmpty && list.leastRecentlyUsed == nil && list.keysByRecency.isEmpty)
    }

    @Test func theSketchNeverCountsBelowTheTruthAndForgetsByHalves() {
        // Room for 100 keys: the 100 increments below halve nothing.
        var sketch = FrequencySketch(expectedKeys: 100)
        let keys = (0..<50).map { _ in UInt64.random(in: .min ... .max) }
        for (times, key) in keys.enumerated() {
            for _ in 0..<(times % 5) { sketch.increment(key) }
        }
        for (times, key) in keys.enumerated() { #expect(sketch.estimate(key) >= UInt8(times % 5)) }
        // 100 increments (ten times the keys expected) halve every counter; this key had 12 before the last one.
        var fading = FrequencySketch(expectedKeys: 10)
        let key = keys[0]
        for _ in 0..<12 { fading.increment(key) }
        #expect(fading.estimate(key) == 12)
        for number in 0..<87 { fading.increment(UInt64(number) &* 0x9E37_79B9_7F4A_7C15) }
        #expect(fading.estimate(key) >= 12)
        fading.increment(UInt64(99) &* 0x9E37_79B9_7F4A_7C15)
        #expect(fading.estimate(key) == 6)
    }
}

/// `/graphql` with the limit and the cache, against the embedded task service.
@Suite struct GraphQLEdgeRouteTests {
    func post(_ client: some TestClientProtocol, token: String, _ body: String) async throws -> TestResponse {
        try await client.execute(uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: body)) { $0 }
    }

    @Test func oneCallerOverTheLimitIsRefusedWhileAnotherGoesOn() async throws {
        let harness = try await TestHarness { $0.graphQLRateLimit = GraphQLRateLimit(operations: 3, window: 60) }
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let (bob, _) = try await signIn(client, as: .bob)
            let query = #"{"query":"{ allTasks { id } }"}"#
            let began = ContinuousClock.now
            for left in [2, 1] {
                let answer = try await post(client, token: ada, query)
                #expect(answer.status == .ok)
                #expect(answer.headers[.rateLimitPolicy] == "\"graphql\";q=3;w=60")
                #expect(answer.headers[.rateLimit]?.hasPrefix("\"graphql\";r=\(left);") == true)
            }
            // A batch of two counts two: one is left, so it is refused whole.
            let batch = try await post(client, token: ada, "[\(query),\(query)]")
            #expect(batch.status == .tooManyRequests)
            #expect(try await post(client, token: ada, query).status == .ok)

            let refused = try await post(client, token: ada, query)
            #expect(refused.status == .tooManyRequests)
            // Counted in whole seconds from the first request: as many may have passed as this test took (several,
            // on a loaded machine), and no more.
            let passed = Int((ContinuousClock.now - began).components.seconds) + 1
            let retryAfter = try #require(refused.headers[.retryAfter].flatMap { Int($0) })
            #expect((20 - passed)...20 ~= retryAfter)
            let reset = try #require(refused.headers[.rateLimit]?.firstMatch(of: /^"graphql";r=0;t=(\d+)$/).flatMap { Int($0.1) })
            #expect((60 - passed)...60 ~= reset)
            let error = try #require((refused.json()["errors"] as? [[String: Any]])?.first)
            #expect((error["extensions"] as? [String: Any])?["code"] as? String == "RATE_LIMITED")
            #expect((error["message"] as? String)?.contains("3 per minute") == true)

            #expect(try await post(client, token: bob, query).status == .ok)

            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(String(buffer: response.body).contains("foyer_graphql_rate_limited_total 2"))
            }
        }
    }

    @Test func noLimitWhenTurnedOff() async throws {
        let harness = try await TestHarness { $0.graphQLRateLimit = nil }
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            for _ in 0..<5 {
                let answer = try await post(client, token: ada, #"{"query":"{ allTasks { id } }"}"#)
                #expect(answer.status == .ok)
                #expect(answer.headers[.rateLimit] == nil)
            }
        }
    }

    @Test func aRepeatedQueryIsAnsweredFromTheCacheAndAMutationIsReadAtOnce() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let query = #"{"query":"{ allTasks { title } }"}"#
            #expect(String(buffer: try await post(client, token: ada, query).body) == #"{"data":{"allTasks":[]}}"#)
            #expect(String(buffer: try await post(client, token: ada, query).body) == #"{"data":{"allTasks":[]}}"#)
            try await client.execute(uri: "/metrics", method: .get) { response in
                let metrics = String(buffer: response.body)
                #expect(metrics.contains(#"foyer_graphql_cache_total{result="hit"} 1"#))
                #expect(metrics.contains(#"foyer_graphql_cache_total{result="miss"} 1"#))
            }
            let created = try await post(client, token: ada, #"{"query":"mutation { createTask(title: \"Fresh\", description: \"d\") { id } }"}"#)
            #expect(created.status == .ok)
            #expect(String(buffer: try await post(client, token: ada, query).body) == #"{"data":{"allTasks":[{"title":"Fresh"}]}}"#)
        }
    }
}

/// The one-pass reading of a POST body agrees with JSONDecoder wherever it answers, and leaves the rest to it.
@Suite struct EnvelopeScanTests {
    static let decoder = JSONDecoder()

    func decoded(_ body: [UInt8]) -> GraphQLController.Envelope? {
        try? Self.decoder.decode(GraphQLController.Envelope.self, from: Data(body))
    }

    func scanned(_ body: [UInt8]) -> GraphQLController.Envelope? {
        EnvelopeScan.envelope(of: ByteBuffer(bytes: body))
    }

    static let common = [
        #"{"query":"{ allTasks { id } }"}"#,
        #"{"query":"query($after: String) { allTasks(after: $after) { id } }","variables":{"after":"1-2"}}"#,
        #" { "operationName" : "Q" , "query" : "query Q { a }", "variables" : null } "#,
        #"{"query":"line\nbreak \"quoted\" \\ \/ \u00e9 \ud83d\ude00 \t é","operationName":null,"variables":{"a":[1,-2.5e+3,true,false,null,{"b":"c"}],"d":{}}}"#,
        #"{"query":"{ a }","other":[0, 0.5, -0, 1E9, -12.0e-7],"extensions":null}"#,
        #"{}"#,
    ]

    @Test func commonBodiesAreReadInOnePassAsJSONDecoderReadsThem() throws {
        for body in Self.common.map({ Array($0.utf8) }) {
            let text = String(decoding: body, as: UTF8.self)
            let fast = try #require(scanned(body), "\(text)")
            let slow = try #require(decoded(body), "\(text)")
            #expect(fast.query == slow.query, "\(text)")
            #expect(fast.operationName == slow.operationName, "\(text)")
        }
        #expect(scanned(Array(Self.common[3].utf8))?.query == "line\nbreak \"quoted\" \\ / é 😀 \t é")
    }

    @Test func whatItDoesNotSettleIsLeftToJSONDecoder() {
        let refusedByBoth = [
            #"{"query":"a""#, #"{"query":"\x"}"#, #"{"query":"a","variables":[]}"#, #"{"query":5}"#,
            #"{"query":"a"} x"#, "{\"query\":\"tab\there\"}", #"{"a":tru}"#, "",
        ]
        for body in refusedByBoth {
            #expect(scanned(Array(body.utf8)) == nil, "\(body)")
            #expect(decoded(Array(body.utf8)) == nil, "\(body)")
        }
        // JSONDecoder's to read: persisted queries, a key twice, a lone surrogate, a batch; and what it lets pass
        // though RFC 8259 does not (a trailing comma, numbers it never reads).
        let leftToIt = [
            #"{"query":"a","extensions":{"persistedQuery":{"version":1,"sha256Hash":"00"}}}"#, #"{"query":"a","query":"b"}"#,
            #"{"query":"\ud800"}"#, #"[{"query":"a"}]"#, #"{"query":"a",}"#, #"{"a":01}"#, #"{"a":-}"#, #"{"a":1.}"#,
        ]
        for body in leftToIt { #expect(scanned(Array(body.utf8)) == nil, "\(body)") }
    }

    /// Bodies bent at random, byte by byte: whatever the scan accepts, JSONDecoder accepts too and reads alike.
    @Test func neverAcceptsWhatJSONDecoderRefusesNorReadsItOtherwise() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        let alphabet = Array(#"{}[]":,\ 0123456789.-+eEtrufalsnqyx/é"#.utf8) + [0x09, 0x0A, 0x00, 0xFF]
        var accepted = 0
        for round in 0..<4000 {
            var body = Array(Self.common[round % Self.common.count].utf8)
            for _ in 0...next(3) {
                let at = next(body.count + 1)
                switch next(3) {
                case 0 where at < body.count: body[at] = alphabet[next(alphabet.count)]
                case 1 where at < body.count: body.remove(at: at)
                default: body.insert(alphabet[next(alphabet.count)], at: at)
                }
            }
            guard let fast = scanned(body) else { continue }
            accepted += 1
            let slow = decoded(body)
            #expect(slow != nil, "\(String(decoding: body, as: UTF8.self))")
            #expect(slow?.query == fast.query && slow?.operationName == fast.operationName, "\(String(decoding: body, as: UTF8.self))")
        }
        // Some bent bodies are still JSON: the property was tested, not skipped.
        #expect(accepted > 100)
    }
}
