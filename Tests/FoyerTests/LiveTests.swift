import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import GraphQL
import Testing
#if canImport(Glibc)
import Glibc
#endif

@testable import Foyer

@Suite struct LiveStreamTests {
    @Test func streamNamesAreSignedAndAnAlteredOneIsRefused() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let secret = try await StreamNames.secret(configured: nil, store: .sqlite(database))
        #expect(try await StreamNames.secret(configured: nil, store: .sqlite(database)) == secret, "the generated secret is kept")
        let names = StreamNames(secret: secret)
        let signed = names.signed("tasks")
        #expect(names.verify(signed) == "tasks")
        var altered = Array(signed)
        altered[altered.count - 1] = altered.last == "0" ? "1" : "0"
        #expect(names.verify(String(altered)) == nil)
        // The name swapped under the same signature, and another server's signature, are refused too.
        let postsPart = names.signed("posts").split(separator: "-").first!
        #expect(names.verify(String(postsPart) + String(signed.drop(while: { $0 != "-" }))) == nil)
        #expect(StreamNames(secret: Data("another server".utf8)).verify(signed) == nil)
        #expect(names.verify("tasks") == nil)
    }

    @Test func aChannelReplaysItsWindowAndNamesGapsAndLaggards() async throws {
        let channel = LiveChannel(limits: .init(window: 5, maxAge: .seconds(60), subscriberBuffer: 2))
        for number in 1...8 { channel.publish { _ in ByteBuffer(string: "event \(number)") } }
        // The window holds 4…8.
        guard case .events(let replayed, let through) = await channel.next(after: 5) else { Issue.record("expected events"); return }
        #expect(replayed.map { String(buffer: $0) } == ["event 6", "event 7", "event 8"])
        #expect(through == 8)
        guard case .gap(let latest) = await channel.next(after: 2) else { Issue.record("expected a gap"); return }
        #expect(latest == 8)
        guard case .lagging = await channel.next(after: 5, maxLag: 2) else { Issue.record("expected lagging"); return }

        // A waiting subscriber wakes for the next event, for a heartbeat, and for the close.
        async let waited = channel.next(after: 8)
        try await eventually { channel.waitingCount == 1 }
        channel.publish { _ in ByteBuffer(string: "event 9") }
        guard case .event(let next, let sequence) = await waited else { Issue.record("expected the next event"); return }
        #expect(String(buffer: next) == "event 9")
        #expect(sequence == 9)
        async let beat = channel.next(after: 9)
        try await eventually { channel.waitingCount == 1 }
        channel.heartbeat()
        guard case .heartbeat = await beat else { Issue.record("expected a heartbeat"); return }
        async let closing = channel.next(after: 9)
        try await eventually { channel.waitingCount == 1 }
        channel.close()
        guard case .closed = await closing else { Issue.record("expected the close"); return }
    }

    @Test func eventsAreTooOldAfterTheirMaximumAge() async throws {
        let channel = LiveChannel(limits: .init(window: 100, maxAge: .milliseconds(50), subscriberBuffer: 10))
        channel.publish { _ in ByteBuffer(string: "old") }
        try await Task.sleep(for: .milliseconds(100))
        channel.heartbeat()
        guard case .gap = await channel.next(after: 0) else { Issue.record("an event past its age is no longer replayed"); return }
    }

    /// serve() as a subscriber sees it: ids on every event, HTML split into `data:` lines, replay after
    /// Last-Event-ID, and a reload when the id is from before a restart.
    @Test func serverSentEventsCarryIdsAndResumeAfterLastEventID() async throws {
        func streamsWithTwoEvents() throws -> LiveStreams {
            let streams = LiveStreams(names: StreamNames(secret: Data("secret".utf8)), languages: try Languages.bundled())
            streams.broadcast("<turbo-stream action=\"remove\" target=\"post_1\"></turbo-stream>", on: .posts)
            streams.broadcast("<p>two\nlines</p>", on: .posts)
            return streams
        }
        let streams = try streamsWithTwoEvents()
        let resumed = try await Self.written(by: streams, lastEventID: "\(streams.epoch)-1")
        #expect(resumed.hasPrefix("retry: 2000\n"))
        #expect(!resumed.contains("post_1"), "the event the client had is not sent again")
        #expect(resumed.contains("id: \(streams.epoch)-2\ndata: <p>two\ndata: lines</p>\n\n"))

        let restarted = try streamsWithTwoEvents()
        let fromBeforeARestart = try await Self.written(by: restarted, lastEventID: "oldboot-7")
        #expect(fromBeforeARestart.contains(##"<turbo-frame id="posts-live" src="#" target="_top" data-live-reload>"##))
        #expect(fromBeforeARestart.contains("id: \(restarted.epoch)-2\n"), "the reload moves the client to the latest id")
        #expect(!fromBeforeARestart.contains("<p>two"))

        let fresh = try await Self.written(by: try streamsWithTwoEvents(), lastEventID: nil)
        #expect(!fresh.contains("data:"), "a new subscriber starts from now")
    }

    /// Streams that reconnect by themselves are counted by what they got: the events missed (also none), or a reload.
    /// A page's first connection, resuming from where it was rendered, is not a reconnect.
    @Test func reconnectsAreCountedAsReplayedOrReloaded() async throws {
        let counted = NIOLockedValueBox([LiveStreams.Resumed]())
        // A subscriber is served until the streams close: each one on streams of its own, counting into one list.
        func reconnect(after lastEventID: (_ boot: String) -> String?, reconnected: Bool = true) async throws {
            let streams = LiveStreams(names: StreamNames(secret: Data("secret".utf8)), languages: try Languages.bundled(), resumed: { outcome in counted.withLockedValue { $0.append(outcome) } })
            streams.broadcast("<p>one</p>", on: .posts)
            streams.broadcast("<p>two</p>", on: .posts)
            _ = try await Self.written(by: streams, lastEventID: lastEventID(streams.epoch), reconnected: reconnected)
        }
        try await reconnect { "\($0)-1" }
        try await reconnect { "\($0)-2" }
        try await reconnect { _ in "oldboot-7" }
        try await reconnect(after: { "\($0)-1" }, reconnected: false)
        try await reconnect(after: { _ in nil }, reconnected: false)
        #expect(counted.withLockedValue { $0 } == [.replayed, .replayed, .reloaded])
    }

    /// What serve() writes for one subscriber through its response writer, until the streams close (once it
    /// follows the channel).
    static func written(by streams: LiveStreams, lastEventID: String?, reconnected: Bool = false) async throws -> String {
        let collected = NIOLockedValueBox(ByteBuffer())
        let connection = NIOAsyncTestingChannel()
        let serving = Task {
            var writer: any ResponseBodyWriter = CollectingWriter(collected: collected)
            try await streams.serve(streams.edition(.posts), lastEventID: lastEventID, reconnected: reconnected, on: connection, to: &writer)
        }
        // Followed once its opening and replay are written: a close before would leave nothing to replay.
        try await eventually { streams.channel(streams.edition(.posts)).followedCount == 1 }
        streams.closeAll()
        try await serving.value
        return collected.withLockedValue { String(buffer: $0) }
    }

    /// Once the opening is written, events go from the channel's fan-out straight to the connection: each change,
    /// heartbeats, and at the end of the session the task writes the last event itself.
    @Test func followedConnectionsGetEventsAndHeartbeatsFromTheirEventLoop() async throws {
        let streams = LiveStreams(names: StreamNames(secret: Data("secret".utf8)), languages: try Languages.bundled())
        let connection = NIOAsyncTestingChannel()
        try await connection.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let collected = NIOLockedValueBox(ByteBuffer())
        let serving = Task {
            var writer: any ResponseBodyWriter = CollectingWriter(collected: collected)
            try await streams.serve(streams.edition(.posts), lastEventID: nil, on: connection, to: &writer)
        }
        try await eventually { streams.channel(streams.edition(.posts)).followedCount == 1 }
        streams.broadcast("<p>first</p>", on: .posts)
        streams.broadcast("<p>second</p>", on: .posts)
        #expect(try await Self.body(connection).contains("id: \(streams.epoch)-1\ndata: <p>first</p>\n\n"))
        #expect(try await Self.body(connection).contains("data: <p>second</p>"))
        streams.heartbeat()
        #expect(try await Self.body(connection) == ": heartbeat\n\n")
        streams.channel(streams.edition(.posts)).end(subscriber: 1)  // as its session's ending does: the channel's first subscriber
        try await serving.value
        let written = collected.withLockedValue { String(buffer: $0) }
        #expect(written.hasPrefix("retry: 2000\n: posts\n\n"))
        #expect(written.hasSuffix("event: signed-out\ndata: /sign_in\n\n"))
        #expect(!written.contains("first"), "events go to the connection, not through the writer")
        #expect(streams.channel(streams.edition(.posts)).subscriberCount == 0)
    }

    /// One connection can follow several streams (a browser's tabs share one): each event, replayed or followed,
    /// comes after `event: <its stream's signed name>`, the connection has one heartbeat, and the end of any one ends
    /// all of them.
    @Test func oneConnectionFollowsSeveralStreamsNamingEachEvent() async throws {
        let streams = LiveStreams(names: StreamNames(secret: Data("secret".utf8)), languages: try Languages.bundled())
        streams.broadcast("<p>one</p>", on: .posts)
        streams.broadcast("<p>two</p>", on: .posts)
        let (posts, tasks) = (String(streams.path(of: .posts, in: streams.languages.fallback).dropFirst("/streams/".count)), String(streams.path(of: .tasks, in: streams.languages.fallback).dropFirst("/streams/".count)))
        let connection = NIOAsyncTestingChannel()
        try await connection.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let collected = NIOLockedValueBox(ByteBuffer())
        let serving = Task {
            var writer: any ResponseBodyWriter = CollectingWriter(collected: collected)
            try await streams.serve([(streams.edition(.posts), "\(streams.epoch)-1"), (streams.edition(.tasks), nil)], named: true, on: connection, to: &writer)
        }
        try await eventually { streams.channel(streams.edition(.posts)).followedCount == 1 && streams.channel(streams.edition(.tasks)).followedCount == 1 }
        let opening = collected.withLockedValue { String(buffer: $0) }
        #expect(opening == "retry: 2000\n: posts tasks\n\nevent: \(posts)\nid: \(streams.epoch)-2\ndata: <p>two</p>\n\n")
        streams.broadcast("<p>a task</p>", on: .tasks)
        #expect(try await Self.body(connection) == "event: \(tasks)\nid: \(streams.epoch)-1\ndata: <p>a task</p>\n\n")
        streams.broadcast("<p>three</p>", on: .posts)
        #expect(try await Self.body(connection) == "event: \(posts)\nid: \(streams.epoch)-3\ndata: <p>three</p>\n\n")
        streams.heartbeat()
        #expect(try await Self.body(connection) == ": heartbeat\n\n")
        streams.channel(streams.edition(.tasks)).end(subscriber: 1)  // as its session's ending does
        try await serving.value
        #expect(collected.withLockedValue { String(buffer: $0) }.hasSuffix("event: signed-out\ndata: /sign_in\n\n"))
        #expect(try await connection.readOutbound(as: HTTPResponsePart.self) == nil, "one heartbeat for the connection, not one per stream")
        #expect(streams.channel(streams.edition(.posts)).subscriberCount == 0 && streams.channel(streams.edition(.tasks)).subscriberCount == 0)
    }

    /// A signed-in viewer is not sent what people a block keeps them apart from wrote, neither replayed nor followed,
    /// while everyone else is; when their blocks change, their live part loads again and what they are sent follows.
    @Test func aViewerIsNotSentTheWordsOfPeopleABlockKeepsThemApartFrom() async throws {
        let streams = LiveStreams(names: StreamNames(secret: Data("secret".utf8)), languages: try Languages.bundled())
        streams.broadcast("<p>by seven</p>", on: .posts, author: 7)
        streams.broadcast("<p>by eight</p>", on: .posts, author: 8)
        let (viewer, anyone) = (NIOAsyncTestingChannel(), NIOAsyncTestingChannel())
        try await viewer.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        try await anyone.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let (openedForViewer, openedForAnyone) = (NIOLockedValueBox(ByteBuffer()), NIOLockedValueBox(ByteBuffer()))
        let servingViewer = Task {
            var writer: any ResponseBodyWriter = CollectingWriter(collected: openedForViewer)
            try await streams.serve(
                streams.edition(.posts), lastEventID: "\(streams.epoch)-0", viewer: .init(userId: 1, keptApart: [7]), on: viewer, to: &writer
            )
        }
        let servingAnyone = Task {
            var writer: any ResponseBodyWriter = CollectingWriter(collected: openedForAnyone)
            try await streams.serve(streams.edition(.posts), lastEventID: "\(streams.epoch)-0", on: anyone, to: &writer)
        }
        try await eventually { streams.channel(streams.edition(.posts)).followedCount == 2 }
        let replayed = openedForViewer.withLockedValue { String(buffer: $0) }
        #expect(replayed.contains("by eight") && !replayed.contains("by seven"), "the replay leaves seven out")
        #expect(openedForAnyone.withLockedValue { String(buffer: $0) }.contains("by seven"))

        streams.broadcast("<p>seven again</p>", on: .posts, author: 7)
        streams.broadcast("<p>eight again</p>", on: .posts, author: 8)
        streams.broadcast("<p>nobody's</p>", on: .posts)
        #expect(try await Self.body(anyone).contains("seven again"))
        #expect(try await Self.body(viewer) == "id: \(streams.epoch)-4\ndata: <p>eight again</p>\n\n", "seven's event is skipped")
        #expect(try await Self.body(viewer).contains("nobody's"))

        // Unblocked: the live part loads again, and seven's words come through.
        streams.keepApart(viewer: 1, from: [])
        #expect(try await Self.body(viewer).contains(##"<turbo-frame id="posts-live" src="#" target="_top" data-live-reload>"##))
        streams.broadcast("<p>seven once more</p>", on: .posts, author: 7)
        #expect(try await Self.body(viewer).contains("seven once more"))
        streams.closeAll()
        try await servingViewer.value
        try await servingAnyone.value
    }

    /// A followed connection that closes ends its subscription at once, with no event needed to find out.
    @Test func aClosedConnectionEndsItsFollowing() async throws {
        let channel = LiveChannel()
        let connection = NIOAsyncTestingChannel()
        try await connection.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let following = LiveChannel.Connection(channel: connection, write: { connection.write($0, promise: nil) }, heartbeat: ByteBuffer(string: "."))
        async let ending = channel.subscribed { subscriber in await channel.follow(following, after: 0, subscriber: subscriber) }
        try await eventually { channel.followedCount == 1 }
        channel.publish { _ in ByteBuffer(string: "one") }
        #expect(try await connection.waitForOutboundWrite(as: ByteBuffer.self) == ByteBuffer(string: "one"))
        try await connection.close()
        guard case .gone = await ending else { Issue.record("expected the following to end with the connection"); return }
    }

    /// A followed connection that stops taking what is written is let go once more events than its buffer went
    /// to it meanwhile; it reconnects and replays. (A socket then closes with 1013: `GraphQLWebSocketTests`.)
    @Test func aFollowedConnectionThatStopsTakingWritesIsLetGo() async throws {
        let channel = LiveChannel(limits: .init(window: 100, maxAge: .seconds(60), subscriberBuffer: 3))
        let connection = NIOAsyncTestingChannel()
        try await connection.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let following = LiveChannel.Connection(channel: connection, write: { connection.write($0, promise: nil) }, heartbeat: nil)
        async let ending = channel.subscribed { subscriber in await channel.follow(following, after: 0, subscriber: subscriber) }
        try await eventually { channel.followedCount == 1 }
        connection.isWritable = false
        for number in 1...4 { channel.publish { _ in ByteBuffer(string: "event \(number)") } }
        guard case .lagging = await ending else { Issue.record("expected the connection to be let go as lagging"); return }
    }

    /// The body bytes of the next part written to a connection.
    static func body(_ connection: NIOAsyncTestingChannel) async throws -> String {
        guard case .body(let bytes) = try await connection.waitForOutboundWrite(as: HTTPResponsePart.self) else { return "" }
        return String(buffer: bytes)
    }

    struct CollectingWriter: ResponseBodyWriter {
        let collected: NIOLockedValueBox<ByteBuffer>
        mutating func write(_ buffer: ByteBuffer) async throws {
            var buffer = buffer
            collected.withLockedValue { $0.writeBuffer(&buffer) }
        }
        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }

    @Test func taskStreamsNeedASignInAndForgedNamesAreRefused() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let tasksPath = try await client.execute(uri: "/tasks", method: .get, headers: bearer(token).merging(browserHeaders)) { response in
                try Self.streamPath(in: response.text)
            }
            try await client.execute(uri: tasksPath, method: .get, headers: [.accept: "text/event-stream"]) { response in
                #expect(response.status == .unauthorized)
            }
            var forged = tasksPath
            forged.removeLast()
            forged += tasksPath.hasSuffix("a") ? "b" : "a"
            try await client.execute(uri: forged, method: .get, headers: bearer(token)) { response in
                #expect(response.status == .forbidden)
                #expect(response.text.contains("not signed by this server"))
            }
            // A name the server never signs, with a signature made up for it.
            try await client.execute(uri: "/streams/dXNlcnM--00", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .forbidden)
            }
        }
    }

    /// `GET /streams?follow=…` takes each stream's signed name and where its page is; the names are checked as on
    /// one stream's path, a task stream still needs a sign-in, and a request that names none or one twice is refused.
    @Test func severalStreamsAreFollowedOnOneConnection() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let tasks = try await client.execute(uri: "/tasks", method: .get, headers: bearer(token).merging(browserHeaders)) { try Self.streamName(in: $0.text) }
            let (posts, position) = try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { response in
                (try Self.streamName(in: response.text), try #require(response.text.firstMatch(of: /data-last-event-id="([^"]+)"/)?.1))
            }
            let port = try #require(client.port)
            let both = "/streams?follow=\(posts)%3A\(position)&follow=\(tasks)"
            let stream = try RawStream(port: port, path: both, headers: ["Authorization: Bearer \(token)"])
            #expect(try await stream.read(until: ": posts tasks\n").contains("200 OK"))
            _ = try await createPost(client, token: token, title: "Seen on both")
            #expect(try await stream.read(until: "</turbo-stream>").contains("event: \(posts)\nid: "))

            for (path, status) in [
                (both, HTTPResponse.Status.unauthorized), ("/streams?follow=\(posts)&follow=\(posts)", .badRequest), ("/streams", .badRequest),
                ("/streams?follow=\(posts.dropLast())", .forbidden),
            ] {
                try await client.execute(uri: path, method: .get, headers: [.accept: "text/event-stream"]) { response in
                    #expect(response.status == status, "\(path)")
                }
            }
        }
    }

    static func streamName(in html: String) throws -> String {
        String(try streamPath(in: html).dropFirst("/streams/".count))
    }

    @Test func pagesEmbedTheirSignedStreamAndALiveFrame() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let postID = try await createPost(client, token: token, title: "Followed")
            for path in ["/posts", "/posts/\(postID)"] {
                try await client.execute(uri: path, method: .get, headers: browserHeaders) { response in
                    let streamPath = try Self.streamPath(in: response.text)
                    #expect(streamPath.hasPrefix("/streams/"))
                    #expect(response.text.contains(#"<turbo-frame id="posts-live" target="_top">"#))
                    #expect(response.text.contains(#"<script src="/live.js" defer></script>"#))
                }
            }
            try await client.execute(uri: "/posts/\(postID)", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains(#"id="post_\#(postID)_content""#))
                #expect(response.text.contains(#"id="post_\#(postID)_detail""#))
            }
        }
    }

    /// Every write reaches open pages as rendered `<turbo-stream>` HTML, whichever way it was made: the post
    /// API, a task form, `/graphql`. Read over a real socket, as a browser's EventSource would.
    @Test func writesReachOpenStreamsWhicheverWayTheyAreMade() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let session = try await browserSession(client)
            let pages = try await client.execute(uri: "/tasks", method: .get, headers: bearer(token).merging(browserHeaders)) { $0.text }
            let posts = try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { $0.text }
            let port = try #require(client.port)
            let taskStream = try RawStream(port: port, path: try Self.streamPath(in: pages), headers: ["Authorization: Bearer \(token)"])
            let postStream = try RawStream(port: port, path: try Self.streamPath(in: posts))
            #expect(try await taskStream.read(until: ": tasks\n").contains("200 OK"))
            #expect(try await postStream.read(until: ": posts\n").contains("text/event-stream"))

            let postID = try await createPost(client, token: token, title: "Live <post>")
            let created = try await postStream.read(until: "</turbo-stream>")
            #expect(created.contains(#"<turbo-stream action="prepend" target="posts">"#))
            #expect(created.contains(#"<template><li id="post_\#(postID)">"#))
            #expect(created.contains("Live &lt;post&gt;"))

            try await client.execute(
                uri: "/tasks", method: .post, headers: session.headers,
                body: formBody([("authenticity_token", session.csrf), ("title", "Live task"), ("description", "d"), ("status", "OPEN")])
            ) { #expect($0.status == .seeOther) }
            #expect(try await taskStream.read(until: "</turbo-stream>").contains(#"<turbo-stream action="append" target="tasks">"#))
            try await client.execute(
                uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(string: #"{"query":"mutation { updateTask(id: \"1\", version: 1, status: COMPLETE) { id } }"}"#)
            ) { #expect($0.status == .ok) }
            let updated = try await taskStream.read(until: "_content\">")
            #expect(updated.contains(#"<turbo-stream action="replace" target="task_1">"#))
            #expect(updated.contains(#"data-status="COMPLETE""#))
        }
    }

    /// A page follows the stream of its own language: a change reaches a Portuguese page in Portuguese, a Chinese one
    /// in Chinese, while an English page (the default, under the stream's old name) is sent English.
    @Test func openPagesAreSentChangesInTheirLanguage() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let port = try #require(client.port)
            var streams: [(words: String, stream: RawStream)] = []
            var paths: Set<String> = []
            for (acceptLanguage, words) in [("pt-BR,pt;q=0.9", "agora mesmo"), ("zh-CN,zh;q=0.9", "刚刚"), ("en-US,en;q=0.9", "just now")] {
                let page = try await client.execute(
                    uri: "/posts", method: .get, headers: browserHeaders.merging([.acceptLanguage: acceptLanguage])
                ) { $0.text }
                let path = try Self.streamPath(in: page)
                paths.insert(path)
                let stream = try RawStream(port: port, path: path)
                #expect(try await stream.read(until: ": posts\n").contains("200 OK"))
                streams.append((words, stream))
            }
            #expect(paths.count == 3, "one stream per language")
            let postID = try await createPost(client, token: token, title: "Said three ways")
            for (words, stream) in streams {
                let created = try await stream.read(until: "</turbo-stream>")
                #expect(created.contains(#"<li id="post_\#(postID)">"#))
                #expect(created.contains(words), "\(words) in \(created)")
            }
        }
    }

    static func streamPath(in html: String) throws -> String {
        let marker = #"<turbo-stream-source src=""#
        let start = try #require(html.range(of: marker), "the page follows no stream")
        return String(html[start.upperBound...].prefix { $0 != "\"" })
    }
}

/// Turbo submits forms with `Accept: text/vnd.turbo-stream.html, …`: the status buttons and the deletes answer
/// with the `<turbo-stream>` that changes the page in place; other clients keep their 303.
@Suite struct TurboStreamAnswerTests {
    static let turboAccept = "text/vnd.turbo-stream.html, text/html, application/xhtml+xml"

    @Test func statusButtonsAndDeletesAnswerInStreams() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let session = try await browserSession(client)
            let turbo = session.headers.merging([.accept: Self.turboAccept])
            let path = try await TaskPagesTests().createTask(client, session, title: "Streamed")
            let id = String(path.split(separator: "/").last!)
            try await client.execute(
                uri: "/tasks/\(id)/status", method: .post, headers: turbo,
                body: formBody([("authenticity_token", session.csrf), ("version", "1"), ("status", "COMPLETE")])
            ) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/vnd.turbo-stream.html") == true)
                #expect(response.text.contains(#"<turbo-stream action="replace" target="task_\#(id)">"#))
                #expect(response.text.contains(#"data-status="COMPLETE""#))
                #expect(!response.text.contains(session.csrf), "fragments hold nothing of one user's")
            }
            // A native shell keeps its redirect: that is what moves its screens.
            try await client.execute(
                uri: "/tasks/\(id)/status", method: .post, headers: turbo.merging([.userAgent: "Hotwire Native iOS; Turbo Native iOS"]),
                body: formBody([("authenticity_token", session.csrf), ("version", "2"), ("status", "OPEN")])
            ) { #expect($0.status == .seeOther) }
            try await client.execute(
                uri: path, method: .post, headers: turbo, body: formBody([("_method", "delete"), ("authenticity_token", session.csrf)])
            ) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#"<turbo-stream action="remove" target="task_\#(id)">"#))
                #expect(response.text.contains(#"target="task_\#(id)_detail""#))
            }

            let (token, _) = try await signIn(client)
            let postID = try await createPost(client, token: token)
            try await client.execute(
                uri: "/posts/\(postID)", method: .post, headers: turbo,
                body: formBody([("_method", "delete"), ("authenticity_token", session.csrf)])
            ) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#"<turbo-stream action="remove" target="post_\#(postID)">"#))
            }
            let another = try await createPost(client, token: token)
            try await client.execute(
                uri: "/posts/\(another)", method: .post, headers: session.headers,
                body: formBody([("_method", "delete"), ("authenticity_token", session.csrf)])
            ) { response in
                #expect(response.status == .seeOther, "without the stream type in Accept, a redirect as before")
            }
        }
    }
}

/// A plain socket that asks for a stream and reads what comes, as any HTTP client would; no buffering in between.
/// Its blocking reads run on a thread of their own: on the concurrency pool (two threads on a two-core machine)
/// a few of them at once, in tests running side by side, would leave no thread for the server they wait for.
final class RawStream: @unchecked Sendable {
    private let socket: Int32
    private var received = ""

    init(port: Int, path: String, headers: [String] = []) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = (["GET \(path) HTTP/1.1", "Host: 127.0.0.1", "Accept: text/event-stream"] + headers).joined(separator: "\r\n") + "\r\n\r\n"
        _ = request.withCString { send(socket, $0, strlen($0), 0) }
    }

    deinit { close(socket) }

    /// Everything up to and including `marker` not returned before; throws after 5 s without it.
    func read(until marker: String) async throws -> String {
        try await withCheckedThrowingContinuation { reading in
            Thread.detachNewThread { reading.resume(with: Result { try self.readBlocking(until: marker) }) }
        }
    }

    private func readBlocking(until marker: String) throws -> String {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while received.range(of: marker) == nil {
            let count = recv(socket, &buffer, buffer.count, 0)
            guard count > 0 else { throw POSIXError(.ETIMEDOUT) }
            received += String(decoding: buffer[0..<count], as: UTF8.self)
        }
        let end = received.range(of: marker)!.upperBound
        defer { received = String(received[end...]) }
        return String(received[..<end])
    }
}

/// GraphQL subscriptions on the embedded service share one execution per distinct request.
@Suite struct SharedSubscriptionTests {
    @Test func subscribersOfTheSameRequestShareOneFeedThatEndsWithTheLastOne() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let executor = try EmbeddedGraphQLExecutor(store: EmbeddedTaskRepository(store: .sqlite(database)), changes: TaskChanges())
        let added = GraphQLRequest(query: "subscription { taskAdded { id title } }")
        let credentials = UpstreamCredentials(bearerToken: nil)
        let other = try await executor.subscribe(GraphQLRequest(query: "subscription { taskDeleted { id } }"), credentials: credentials)

        do {
            var first = try await executor.subscribe(added, credentials: credentials).makeAsyncIterator()
            do {
                var second = try await executor.subscribe(added, credentials: credentials).makeAsyncIterator()
                #expect(executor.shared.feedCount == 2, "one feed per distinct request")
                _ = try await executor.execute(
                    GraphQLRequest(query: #"mutation { createTask(title: "Shared", description: "") { id } }"#), credentials: credentials
                )
                guard case .next(let one) = try await first.next(), case .next(let two) = try await second.next() else {
                    Issue.record("both subscribers get the result")
                    return
                }
                // Key order in GraphQLSwift's results varies from run to run: compare what they say.
                let result = try #require(try JSONSerialization.jsonObject(with: Data(buffer: one)) as? [String: [String: [String: String]]])
                #expect(result == ["data": ["taskAdded": ["id": "1", "title": "Shared"]]])
                #expect(one == two, "the same bytes, executed and encoded once")
            }
            #expect(executor.shared.feedCount == 2, "one subscriber of the request is left")
        }
        #expect(executor.shared.feedCount == 1, "the last subscriber of a request leaving stops its feed")
        _ = other
    }
}
