import Foundation
import GraphQL
import Logging
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import Foyer

/// Instances sharing a PostgreSQL database: the bus between them, the leader among them, and what each feature
/// does with the others' messages, in-process, two stores on one PostgreSQL.
@Suite struct ClusterTests {
    static let quiet: Logger = {
        var logger = Logger(label: "test-cluster")
        logger.logLevel = .warning
        return logger
    }()

    @Test func messagesOfEveryTopicArriveInTheOrderSentLargeOnesByReferenceAndNeverBackToTheirSender() async throws {
        let first = try await Store.fresh(.postgres)
        let second = try await Store.reopen(first)
        let (storeA, storeB) = (try #require(first.postgres), try #require(second.postgres))
        let (a, b) = (ClusterBus(store: storeA, logger: Self.quiet), ClusterBus(store: storeB, logger: Self.quiet))
        let (words, numbers) = (ClusterTopic<String>("test.words"), ClusterTopic<[Int]>("test.numbers"))
        let (heardByA, heardByB) = (Heard(), Heard())
        a.on(words) { heardByA.append("word \($0)") }
        b.on(words) { heardByB.append("word \($0)") }
        b.on(numbers) { heardByB.append("numbers \($0)") }
        let running = [Task { await a.run() }, Task { await b.run() }]
        defer {
            for task in running { task.cancel() }
            first.close()
            second.close()
        }
        // Both listen once a probe from each reaches the other.
        try await eventually { a.send("probe", on: words); return heardByB.items.contains("word probe") }
        try await eventually { b.send("probe", on: words); return heardByA.items.contains("word probe") }
        heardByA.clear()
        heardByB.clear()

        let large = String(repeating: "é", count: 6_000)  // 12,000 bytes: over a notification's 8,000
        a.send("one", on: words)
        a.send([1, 2], on: numbers)
        a.send(large, on: words)
        a.send("two", on: words)
        let expected = ["word one", "numbers [1, 2]", "word \(large)", "word two"]
        try await eventually { heardByB.items.filter { $0 != "word probe" }.count >= expected.count }
        #expect(heardByB.items.filter { $0 != "word probe" } == expected, "in the order sent, whatever the topic or size")
        #expect(heardByA.items.allSatisfy { $0 == "word probe" }, "an instance ignores its own messages")
        let stored = try await storeA.query("SELECT count(*) FROM foyer_cluster_messages")
        #expect(try stored[0].decode(Int.self) == 1, "only the large one was stored")
    }

    @Test func oneInstanceLeadsAndAnotherTakesOverWhenItGoes() async throws {
        let first = try await Store.fresh(.postgres)
        let second = try await Store.reopen(first)
        let (storeA, storeB) = (try #require(first.postgres), try #require(second.postgres))
        let (a, b) = (ClusterLeadership(store: storeA, logger: Self.quiet), ClusterLeadership(store: storeB, logger: Self.quiet))
        let tookTheLead = Heard()
        a.whenLeading { tookTheLead.append("a") }
        b.whenLeading { tookTheLead.append("b") }
        let (runningA, runningB) = (Task { await a.run() }, Task { await b.run() })
        defer {
            runningA.cancel()
            runningB.cancel()
            first.close()
            second.close()
        }
        try await eventually { a.isLeader != b.isLeader }
        let (leader, follower, leaderStore, leaderRun) = a.isLeader ? (a, b, first, runningA) : (b, a, second, runningB)
        // The leader's process dies: its connections close, and with them the lock.
        leaderRun.cancel()
        leaderStore.close()
        try await eventually(within: .seconds(10)) { follower.isLeader }
        #expect(!leader.isLeader)
        // Each takes the lead once, and says so (open task pages then load their tasks again).
        #expect(tookTheLead.items.sorted() == ["a", "b"])
    }

    @Test func aSessionRevokedOnOneInstanceLeavesTheOthersCacheAndEndsWhatItHoldsOpenThere() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let user = try #require(try await a.sessions.users.storage.find(email: TestUser.ada.email))
        let (session, token) = try await a.sessions.sessions.create(for: user, userAgent: "test", ipAddress: nil)
        #expect(try await b.sessions.sessions.find(token: token) != nil)
        #expect(b.sessions.sessions.cache.lookup(token: token, now: Date()) != nil, "B now holds it in its cache")
        // What the session holds open on B (an event stream, a websocket) ends with it.
        let ended = Heard()
        let release = b.sessions.holds.hold(session) { ended.append("ended") }
        defer { release() }
        #expect(try await a.sessions.sessions.revoke(id: session.id, userId: user.id!))
        try await eventually(within: .seconds(10)) { b.sessions.sessions.cache.lookup(token: token, now: Date()) == nil }
        try await eventually(within: .seconds(10)) { ended.items == ["ended"] }
        #expect(try await b.sessions.sessions.find(token: token) == nil)
    }

    /// A name (or address) changed through one instance: the others read the account again at once, instead of
    /// answering with their cached sign-in's old name for up to a minute.
    @Test func anAccountChangedOnOneInstanceLeavesTheOthersCachedSignIns() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let user = try #require(try await a.sessions.users.storage.find(email: TestUser.ada.email))
        let (_, token) = try await a.sessions.sessions.create(for: user, userAgent: "test", ipAddress: nil)
        #expect(try await b.sessions.sessions.find(token: token) != nil)
        #expect(b.sessions.sessions.cache.lookup(token: token, now: Date()) != nil, "B now holds it in its cache")
        a.sessions.sessions.forgetCachedSignIns(of: user.id!)
        try await eventually(within: .seconds(10)) { b.sessions.sessions.cache.lookup(token: token, now: Date()) == nil }
    }

    @Test func aPostWrittenOnOneInstanceReachesTheOthersPagesAsStored() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let heard = Heard()
        b.posts.changes.listen { event in
            switch event {
            case .change(.created(let post)): heard.append("created \(post.post.title)")
            case .change(.updated(let post)): heard.append("updated \(post.post.title)")
            case .change(.deleted(let id)): heard.append("deleted \(id)")
            case .missed: heard.append("missed")
            }
        }
        let user = try #require(try await a.sessions.users.storage.find(email: TestUser.ada.email))
        let generation = b.posts.posts.generation.current
        let post = try await a.posts.posts.create(PostChanges(title: "From A", content: "hello"), author: user)
        _ = try await a.posts.posts.update(post, with: PostChanges(title: "From A, edited", content: nil))
        try await a.posts.posts.delete(id: post.id)
        // The created post is read back when its message arrives, by which time it may be edited or gone.
        try await eventually(within: .seconds(2)) { heard.items.last == "deleted \(post.id)" }
        #expect(heard.items.allSatisfy { !$0.hasPrefix("missed") })
        #expect(b.posts.posts.generation.current > generation, "B's cached lists let go")
    }

    /// Each write is one live event, numbered by the store: B publishes A's events under A's numbers, once, and a
    /// page that followed A resumes on B with exactly what it missed.
    @Test func aLivePageFollowingOneInstanceResumesOnAnother() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let user = try #require(try await a.sessions.users.storage.find(email: TestUser.ada.email))
        let (streamsA, streamsB) = (a.app.streams, b.app.streams)
        #expect(streamsA.epoch == streamsB.epoch)
        let first = try await a.posts.posts.create(PostChanges(title: "First from A", content: "one"), author: user)
        try await eventually(within: .seconds(2)) { streamsA.channel(streamsA.edition(.posts)).latest == 1 }
        let seenOnA = streamsA.position(of: .posts, in: streamsA.languages.fallback)
        _ = try await a.posts.posts.create(PostChanges(title: "Second from A", content: "two"), author: user)
        _ = try await b.posts.posts.update(first, with: PostChanges(title: "First, edited on B", content: nil))
        try await eventually(within: .seconds(2)) { streamsA.channel(streamsA.edition(.posts)).latest == 3 && streamsB.channel(streamsB.edition(.posts)).latest == 3 }
        // Each write was one event: B read A's from the store rather than appending them again when told of them
        // (it hears of a post before its event, so an event of its own would have come first, and numbered lower).
        let kept = try await a.store.liveJournalStorage.events(of: "posts", after: 0, within: .init())
        #expect(kept.latest == 3 && kept.events.filter { $0.html.contains("Second from A") }.count == 1)

        let resumed = try await LiveStreamTests.written(by: streamsB, lastEventID: seenOnA, reconnected: true)
        #expect(!resumed.contains("First from A") && !resumed.contains("data-live-reload"))
        let second = try #require(resumed.range(of: "id: \(streamsB.epoch)-2\n")), edited = try #require(resumed.range(of: "id: \(streamsB.epoch)-3\n"))
        #expect(second.lowerBound < edited.lowerBound && resumed.contains("Second from A") && resumed.contains("First, edited on B"))
    }

    @Test func aTaskChangedOnOneInstanceReachesTheOthersPagesAndSubscriptionsAndItsAuthorIsKnown() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let heard = TaskChangesHeard()
        b.tasks.changes.listen { event in if case .change(let change) = event { heard.append(change) } }
        let subscription = try await b.tasks.executor.subscribe(
            GraphQLRequest(query: "subscription { taskAdded { id title } }"), credentials: UpstreamCredentials(bearerToken: nil)
        )
        // Longer than a notification may be: it travels by reference.
        let description = String(repeating: "long ", count: 3_000)
        let credentials = UpstreamCredentials(bearerToken: nil, userID: 41)
        let reply = try await a.tasks.executor.execute(
            GraphQLRequest(query: #"mutation { createTask(title: "Made on A", description: "\#(description)") { id title } }"#), credentials: credentials
        )
        #expect(reply.status == .ok)
        try await eventually(within: .seconds(2)) { !heard.changes.isEmpty }
        let change = try #require(heard.changes.first)
        #expect(change.kind == .added && change.task.title == "Made on A" && change.task.description == description)
        #expect(change.origin == .otherInstance && change.author == 41)
        var events = subscription.makeAsyncIterator()
        guard case .next(let result) = try await events.next() else {
            Issue.record("B's subscriber hears of A's task")
            return
        }
        #expect(String(buffer: result).contains("Made on A"))
        // Push notifications on the leader skip the task's author, whichever instance it is.
        try await eventually(within: .seconds(2)) { b.tasks.authors?.author(of: change.task.id) == 41 }
    }

    @Test func whatUnifiedPushAnsweredReachesTheInstanceWhoseRequestWaits() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let answer = UnifiedPushClient.Answer.refused(status: 400, detail: "bad token")
        a.app.cluster?.send(PushFeature.Delivered(operation: 12, outcome: answer), on: PushFeature.delivered)
        #expect(await b.push.relay?.outcome(of: 12, waitingUpTo: .seconds(3)) == answer)
    }

    @Test func aBlockMadeOnOneInstanceHoldsOnTheOtherAtOnce() async throws {
        let (a, b) = try await Instance.pair()
        defer { Instance.stop(a, b) }
        let bob = try await UserRepository(store: a.store, passwordHashCost: 4).create(email: TestUser.bob.email, password: TestUser.bob.password)
        let (bobID, adaID) = (try #require(bob.id), Int64(1))
        let (blocksA, blocksB) = (a.posts.posts.blocks, b.posts.posts.blocks)
        // Both instances have read (and keep) Bob's set while it is empty.
        #expect(try await blocksA.keptApart(from: bobID).isEmpty)
        #expect(try await blocksB.keptApart(from: bobID).isEmpty)
        #expect(try await blocksB.keptApart(from: adaID).isEmpty)
        // Bob's list is open on B: the block made on A reaches it, and Ada's post (written on A, through the journal)
        // is not sent to it.
        let connection = NIOAsyncTestingChannel()
        try await connection.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let serving = Task {
            var writer: any ResponseBodyWriter = LiveStreamTests.CollectingWriter(collected: NIOLockedValueBox(ByteBuffer()))
            try await b.app.streams.serve(b.app.streams.edition(.posts), lastEventID: nil, viewer: .init(userId: bobID, keptApart: []), on: connection, to: &writer)
        }
        try await eventually { b.app.streams.channel(b.app.streams.edition(.posts)).followedCount == 1 }
        #expect(try await blocksA.block(adaID, by: bobID))
        #expect(try await blocksA.keptApart(from: bobID) == [adaID])
        try await eventually {
            let (bobs, adas) = (try await blocksB.keptApart(from: bobID), try await blocksB.keptApart(from: adaID))
            return bobs == [adaID] && adas == [bobID]
        }
        #expect(try await LiveStreamTests.body(connection).contains("data-live-reload"), "Bob's open list on B loads again")
        let ada = try #require(try await a.store.userStorage.find(id: adaID))
        _ = try await a.posts.posts.create(PostChanges(title: "Ada's, on A", content: "."), author: ada)
        _ = try await a.posts.posts.create(PostChanges(title: "Bob's, on A", content: "."), author: bob)
        #expect(try await LiveStreamTests.body(connection).contains("Bob&#39;s, on A"), "Ada's post is skipped on B: the journal kept its author")
        try await blocksB.unblock(adaID, by: bobID)
        try await eventually { try await blocksA.keptApart(from: bobID).isEmpty }
        b.app.streams.closeAll()
        try await serving.value
    }
}

/// One Foyer instance's features on a store, its cluster bus running; the relay and other services are not.
private final class Instance: @unchecked Sendable {
    let app: Foundations
    let push: PushFeature
    let sessions: SessionsFeature
    let posts: PostsFeature
    let tasks: TasksFeature
    let store: Store
    private let running: Task<Void, Never>

    init(store: Store) async throws {
        var config = FoyerConfig()
        config.resourcesDirectory = packageRoot
        config.passwordHashCost = 4
        config.logLevel = .warning
        // Push configured (never reached: the relay does not run), so task authors are followed.
        config.pushURL = "http://127.0.0.1:9"
        config.pushIOSVariantID = "variant"
        config.pushIOSVariantSecret = "secret"
        config.pushApplicationID = "app"
        config.pushMasterSecret = "master"
        app = try await Foundations(
            config: config, store: store, logger: ClusterTests.quiet, mobileServices: nil, views: try await Foundations.views(config)
        )
        push = try PushFeature(app)
        sessions = SessionsFeature(app, ending: push.sessionEnding)
        let moderation = try await ModerationFeature(app, mail: MailFeature(app))
        posts = PostsFeature(app, rules: moderation.rules, blocks: moderation.blocks)
        tasks = try TasksFeature(
            app, push: push, providers: ProvidersFeature(app, keycloak: nil, settings: [], sessions: sessions.sessions),
            idempotency: IdempotencyKeys(store: store)
        )
        self.store = store
        let (cluster, streams) = (app.cluster!, app.streams)
        running = Task {
            await withDiscardingTaskGroup { group in
                group.addTask { await cluster.run() }
                group.addTask { await streams.keepJournal() }
            }
        }
    }

    /// Two instances on one fresh database with Ada in it, each hearing the other.
    static func pair() async throws -> (Instance, Instance) {
        let first = try await Store.fresh(.postgres)
        try await UserRepository(store: first, passwordHashCost: 4).create(email: TestUser.ada.email, password: TestUser.ada.password)
        let (a, b) = (try await Instance(store: first), try await Instance(store: try await Store.reopen(first)))
        let probe = ClusterTopic<String>("test.probe")
        let (heardByA, heardByB) = (Heard(), Heard())
        a.app.cluster!.on(probe) { heardByA.append($0) }
        b.app.cluster!.on(probe) { heardByB.append($0) }
        try await eventually { a.app.cluster!.send("a", on: probe); return heardByB.items.contains("a") }
        try await eventually { b.app.cluster!.send("b", on: probe); return heardByA.items.contains("b") }
        return (a, b)
    }

    static func stop(_ instances: Instance...) {
        for instance in instances {
            instance.running.cancel()
            instance.app.streams.journal?.finish()
            instance.store.close()
        }
    }
}

private final class Heard: @unchecked Sendable {
    private let lock = NSLock()
    private var heard: [String] = []
    var items: [String] { lock.withLock { heard } }
    func append(_ item: String) { lock.withLock { heard.append(item) } }
    func clear() { lock.withLock { heard.removeAll() } }
}

private final class TaskChangesHeard: @unchecked Sendable {
    private let lock = NSLock()
    private var heard: [TaskChange] = []
    var changes: [TaskChange] { lock.withLock { heard } }
    func append(_ change: TaskChange) { lock.withLock { heard.append(change) } }
}
