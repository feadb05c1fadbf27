import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import Foyer

/// Live events kept in the store: numbered alike by every instance on it, replayed after a restart, and read by
/// an instance that is behind.
@Suite struct LiveJournalTests {
    static let quiet: Logger = {
        var logger = Logger(label: "test-live-journal")
        logger.logLevel = .warning
        return logger
    }()

    /// What one instance's live streams are on `store`: its window loaded, its journal kept while `body` runs.
    static func withStreams<Value>(on store: Store, _ body: (LiveStreams) async throws -> Value) async throws -> Value {
        let streams = LiveStreams(
            names: StreamNames(secret: Data("secret".utf8)), languages: try Languages.bundled(), journal: try await LiveJournal.open(store: store, cluster: nil, logger: quiet)
        )
        try await streams.loadJournal()
        let keeping = Task { await streams.keepJournal() }
        defer {
            streams.journal?.finish()
            keeping.cancel()
        }
        return try await body(streams)
    }

    @Test(arguments: TestStoreKind.allCases)
    func aPageResumesAfterARestartWithTheEventsItMissed(_ kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let epoch = try await Self.withStreams(on: store) { streams in
            streams.broadcast("<p>one</p>", on: .posts)
            streams.broadcast("<p>two</p>", on: .posts)
            streams.broadcast("<p>three</p>", on: .posts)
            try await eventually { streams.channel(streams.edition(.posts)).latest == 3 }
            return streams.epoch
        }
        try await Self.withStreams(on: store) { restarted in
            #expect(restarted.epoch == epoch, "the store's numbering, not the process's")
            #expect(restarted.position(of: .posts, in: restarted.languages.fallback) == "\(epoch)-3")
            let resumed = try await LiveStreamTests.written(by: restarted, lastEventID: "\(epoch)-1", reconnected: true)
            #expect(resumed.contains("id: \(epoch)-2\ndata: <p>two</p>\n\n") && resumed.contains("id: \(epoch)-3\ndata: <p>three</p>\n\n"))
            #expect(!resumed.contains("<p>one</p>") && !resumed.contains("data-live-reload"), "exactly what it missed, no reload")
        }
        // Numbers go on from the store's latest.
        try await Self.withStreams(on: store) { streams in
            streams.broadcast("<p>four</p>", on: .posts)
            try await eventually { streams.channel(streams.edition(.posts)).latest == 4 }
        }
    }

    /// The store keeps the window's bounds too: what left it is forgotten, and a page behind it reloads.
    @Test(arguments: TestStoreKind.allCases)
    func theStoreKeepsOnlyTheWindow(_ kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let limits = LiveChannel.Limits(window: 3, maxAge: .seconds(60), subscriberBuffer: 8)
        let storage = store.liveJournalStorage
        for number in 1...5 { _ = try await storage.append("<p>\(number)</p>", to: "posts", author: number == 4 ? 42 : nil, keeping: limits) }
        let (all, latest) = try await storage.events(of: "posts", after: 0, within: limits)
        #expect(all.map(\.sequence) == [3, 4, 5] && latest == 5)
        #expect(all.map(\.author) == [nil, 42, nil], "whose words each carries is kept with it")
        #expect(try await storage.events(of: "posts", after: 4, within: limits).events.map(\.html) == ["<p>5</p>"])
        #expect(try await storage.events(of: "tasks", after: 0, within: limits).latest == 0, "each stream numbers its own")
        // Past its age an event is not given, whatever the count.
        let young = LiveChannel.Limits(window: 3, maxAge: .zero, subscriberBuffer: 8)
        #expect(try await storage.events(of: "posts", after: 0, within: young).events.isEmpty)
    }

    /// A page rendered on an instance that is ahead, reconnecting to one that has not read the latest events yet,
    /// follows from its own position there: no reload, and nothing twice.
    @Test func aPageAheadOfTheInstanceItReconnectsToWaitsForItToCatchUp() async throws {
        let store = try await Store.fresh(.sqlite)
        try await Self.withStreams(on: store) { behind in
            // Another instance appends two events this one has not been told of.
            try await Self.withStreams(on: store) { ahead in
                ahead.broadcast("<p>one</p>", on: .posts)
                ahead.broadcast("<p>two</p>", on: .posts)
                try await eventually { ahead.channel(ahead.edition(.posts)).latest == 2 }
            }
            #expect(behind.channel(behind.edition(.posts)).latest == 0)
            let connection = NIOAsyncTestingChannel()
            try await connection.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
            let collected = NIOLockedValueBox(ByteBuffer())
            let serving = Task {
                var writer: any ResponseBodyWriter = LiveStreamTests.CollectingWriter(collected: collected)
                try await behind.serve(behind.edition(.posts), lastEventID: "\(behind.epoch)-1", reconnected: true, on: connection, to: &writer)
            }
            try await eventually { behind.channel(behind.edition(.posts)).followedCount == 1 }
            behind.journal?.enqueue(.catchUp("posts", through: 2))
            let delivered = try await LiveStreamTests.body(connection)
            #expect(delivered == "id: \(behind.epoch)-2\ndata: <p>two</p>\n\n", "only what follows its own position")
            behind.closeAll()
            try await serving.value
            #expect(!collected.withLockedValue { String(buffer: $0) }.contains("data-live-reload"))
        }
    }

    /// A number that skips some means those events were lost here: the window starts again, and a subscriber
    /// behind the skip is told of the gap (it reloads).
    @Test func aChannelGivenANumberPastTheNextStartsItsWindowAgain() async throws {
        let channel = LiveChannel()
        #expect(channel.publish(ByteBuffer(string: "one"), sequence: 1) == 1)
        #expect(channel.publish(ByteBuffer(string: "again"), sequence: 1) == nil, "a number it has is not taken twice")
        #expect(channel.publish(ByteBuffer(string: "five"), sequence: 5) == 5)
        guard case .gap = await channel.next(after: 1) else { Issue.record("two to four are lost here"); return }
        guard case .event(let five, 5) = await channel.next(after: 4) else { Issue.record("expected five"); return }
        #expect(String(buffer: five) == "five")
    }
}
