import Foundation
import GRDB
import GraphQL
import NIOConcurrencyHelpers
import Testing

@testable import Foyer

/// The embedded executor behind a switch: off, it fails like an upstream nobody answers at.
final class SwitchableExecutor: GraphQLExecutor {
    let embedded: EmbeddedGraphQLExecutor
    private let reachable = NIOLockedValueBox(true)

    init(database: any DatabaseWriter) throws {
        embedded = try EmbeddedGraphQLExecutor(store: EmbeddedTaskRepository(store: .sqlite(database)), changes: TaskChanges())
    }

    func set(reachable: Bool) { self.reachable.withLockedValue { $0 = reachable } }

    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        guard reachable.withLockedValue({ $0 }) else { throw GraphQLUpstreamError.unreachable("connection refused") }
        return try await embedded.execute(request, credentials: credentials)
    }

    func subscribe(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        guard reachable.withLockedValue({ $0 }) else { throw GraphQLUpstreamError.unreachable("connection refused") }
        return try await embedded.subscribe(request, credentials: credentials)
    }
}

@Suite struct TaskRepositoryTests {
    func setUp() async throws -> (TaskRepository, SwitchableExecutor, Identity, any DatabaseWriter) {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let user = try await UserRepository(database: database, passwordHashCost: 4).create(email: "ada@example.com", password: "long enough")
        let (session, token) = try await SessionRepository(database: database).create(for: user, userAgent: nil, ipAddress: nil)
        let executor = try SwitchableExecutor(database: database)
        let repository = TaskRepository(client: TaskClient(executor: executor), copies: Store.sqlite(database).taskCopyStorage, metrics: FoyerMetrics())
        return (repository, executor, Identity(user: user, session: session, credential: .bearer, token: token), database)
    }

    @Test func readsFallBackToTheLastGoodAnswerAndComeBackLive() async throws {
        let (tasks, executor, identity, _) = try await setUp()
        let none = UpstreamCredentials()
        let created = try await tasks.create(title: "Cached", description: "d", status: "OPEN", credentials: none)
        let live = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(live.offlineCopyFrom == nil)
        #expect(live.value.map(\.title) == ["Cached"])
        _ = try await tasks.get(id: created.id, for: identity, credentials: none)

        executor.set(reachable: false)
        let offlineList = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(offlineList.value.map(\.title) == ["Cached"])
        #expect(offlineList.offlineCopyFrom != nil)
        let offlineTask = try await tasks.get(id: created.id, for: identity, credentials: none)
        #expect(offlineTask.value?.title == "Cached")
        await #expect(throws: GraphQLUpstreamError.self, "nothing cached for this page") {
            try await tasks.list(first: 20, after: 20, for: identity, credentials: none)
        }

        executor.set(reachable: true)
        _ = try await tasks.create(title: "Added later", description: "d", status: "OPEN", credentials: none)
        let back = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(back.offlineCopyFrom == nil)
        #expect(back.value.map(\.title) == ["Cached", "Added later"])
    }

    @Test func offlineWritesAre503AndChangeNothing() async throws {
        let (tasks, executor, identity, database) = try await setUp()
        let none = UpstreamCredentials()
        let created = try await tasks.create(title: "Keep me", description: "d", status: "OPEN", credentials: none)
        executor.set(reachable: false)
        for write in [
            { _ = try await tasks.create(title: "New", description: "d", status: "OPEN", credentials: none) },
            { _ = try await tasks.update(created.id, version: 1, title: "Changed", description: nil, status: nil, credentials: none) },
            { _ = try await tasks.delete(id: created.id, for: identity, credentials: none) },
        ] as [() async throws -> Void] {
            do {
                try await write()
                Issue.record("an offline write succeeded")
            } catch let error as AppError {
                #expect(error.status == .serviceUnavailable)
            }
        }
        let stored = try await database.read { db in try TaskRecord.fetchAll(db) }
        #expect(stored.map(\.title) == ["Keep me"])
        #expect(stored.first?.version == 1)
    }

    /// The same answer seen again is not written again until its row is a minute old, and an offline page still
    /// says when it was last seen live; a changed answer is written at once.
    @Test func anAnswerSeenAgainIsWrittenOnceAMinuteAndOfflineSaysWhenItWasLastSeen() async throws {
        let (base, executor, identity, database) = try await setUp()
        let clock = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
        var tasks = base
        tasks.now = { clock.withLockedValue { $0 } }
        func advance(to seconds: TimeInterval) { clock.withLockedValue { $0 = Date(timeIntervalSince1970: 1_800_000_000 + seconds) } }
        func row() async throws -> (body: Data, cachedAt: Date)? {
            try await database.read { db in
                try Row.fetchOne(db, sql: "SELECT body, cached_at FROM task_cache WHERE key = 'list:20:0'").map { ($0["body"], $0["cached_at"]) }
            }
        }
        let none = UpstreamCredentials()
        _ = try await tasks.create(title: "First", description: "d", status: "OPEN", credentials: none)
        _ = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(try await row()?.cachedAt == Date(timeIntervalSince1970: 1_800_000_000))

        advance(to: 59)
        _ = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(try await row()?.cachedAt == Date(timeIntervalSince1970: 1_800_000_000), "the same answer, 59 s on: not written again")
        executor.set(reachable: false)
        let offline = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(offline.offlineCopyFrom == Date(timeIntervalSince1970: 1_800_000_059), "last seen live at 59 s, though written at 0")
        executor.set(reachable: true)

        advance(to: 60)
        _ = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        #expect(try await row()?.cachedAt == Date(timeIntervalSince1970: 1_800_000_060), "a minute on: written again")

        advance(to: 61)
        _ = try await tasks.create(title: "Second", description: "d", status: "OPEN", credentials: none)
        let changed = try await tasks.list(first: 20, after: 0, for: identity, credentials: none)
        let written = try #require(try await row())
        #expect(written.cachedAt == Date(timeIntervalSince1970: 1_800_000_061), "a changed answer: written at once")
        #expect(try JSONDecoder().decode([TaskItem].self, from: written.body).map(\.title) == changed.value.map(\.title))
        #expect(changed.value.map(\.title) == ["First", "Second"])
    }

    @Test func aDeletedTaskDoesNotComeBackFromTheOfflineCopy() async throws {
        let (tasks, executor, identity, _) = try await setUp()
        let none = UpstreamCredentials()
        let created = try await tasks.create(title: "Gone", description: "d", status: "OPEN", credentials: none)
        _ = try await tasks.get(id: created.id, for: identity, credentials: none)
        #expect(try await tasks.delete(id: created.id, for: identity, credentials: none))
        executor.set(reachable: false)
        await #expect(throws: GraphQLUpstreamError.self) {
            try await tasks.get(id: created.id, for: identity, credentials: none)
        }
    }
}
