import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import HummingbirdWSTesting
import HummingbirdWebSocket
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

@testable import Foyer

/// WebSocket `/graphql` on the embedded task service, in both dialects, over real sockets.
@Suite struct GraphQLWebSocketTests {
    /// Sends `messages` once the socket is open, then collects what the server says until `done` says enough
    /// (or the server closes). Gives the messages and the close frame.
    static func converse(
        _ client: some TestClientProtocol, dialect: String, headers: HTTPFields = [:], messages: [String],
        until done: @escaping @Sendable ([[String: Any]]) -> Bool
    ) async throws -> (received: [[String: Any]], close: WebSocketCloseFrame?) {
        let received = Received()
        var allHeaders = headers
        allHeaders[.secWebSocketProtocol] = dialect
        let close = try await client.ws("/graphql", configuration: .init(additionalHeaders: allHeaders)) { inbound, outbound, _ in
            for message in messages { try await outbound.write(.text(message)) }
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message,
                    let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
                else { continue }
                if received.append(object, done) { return }
            }
        }
        return (received.all, close)
    }

    final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var messages: [[String: Any]] = []
        func append(_ message: [String: Any], _ done: ([[String: Any]]) -> Bool) -> Bool {
            lock.withLock { messages.append(message); return done(messages) }
        }
        var all: [[String: Any]] { lock.withLock { messages } }
    }

    static func initMessage(_ token: String) -> String {
        #"{"type":"connection_init","payload":{"Authorization":"Bearer \#(token)"}}"#
    }

    static let subscribeToAdded = #"{"query":"subscription { taskAdded { id title status version } }"}"#
    static let createTask = #"{"query":"mutation { createTask(title: \"Live\", description: \"from a socket\") { id title } }"}"#

    @Test(.timeLimit(.minutes(1))) func graphqlTransportWSDeliversTaskAddedToASubscriber() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let (received, _) = try await Self.converse(
                client, dialect: "graphql-transport-ws",
                messages: [
                    Self.initMessage(token),
                    #"{"type":"subscribe","id":"s","payload":\#(Self.subscribeToAdded)}"#,
                    #"{"type":"ping"}"#,
                    // A mutation on the same socket: its own result and the subscriber's event, in either order
                    // (the event is written by the feed's fan-out, the result when the mutation's task is back).
                    #"{"type":"subscribe","id":"m","payload":\#(Self.createTask)}"#,
                ],
                until: { messages in
                    messages.contains { $0["type"] as? String == "next" && $0["id"] as? String == "s" }
                        && messages.contains { $0["type"] as? String == "complete" && $0["id"] as? String == "m" }
                }
            )
            #expect(received.first?["type"] as? String == "connection_ack")
            #expect(received.contains { $0["type"] as? String == "pong" })
            let mutationResult = try #require(received.first { $0["type"] as? String == "next" && $0["id"] as? String == "m" })
            let created = ((mutationResult["payload"] as? [String: Any])?["data"] as? [String: Any])?["createTask"] as? [String: Any]
            #expect(created?["title"] as? String == "Live")
            #expect(received.contains { $0["type"] as? String == "complete" && $0["id"] as? String == "m" })
            let event = try #require(received.first { $0["type"] as? String == "next" && $0["id"] as? String == "s" })
            let added = ((event["payload"] as? [String: Any])?["data"] as? [String: Any])?["taskAdded"] as? [String: Any]
            #expect(added?["id"] as? String == created?["id"] as? String)
            #expect(added?["status"] as? String == "OPEN")
            #expect(added?["version"] as? Int == 1)
        }
    }

    @Test func legacyGraphQLWSDeliversUpdatesAndConfirmsAStop() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let created = try await client.execute(
                uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: Self.createTask)
            ) { response in
                try #require(((response.json()["data"] as? [String: Any])?["createTask"] as? [String: Any])?["id"] as? String)
            }
            let update = #"{"query":"mutation { updateTask(id: \"\#(created)\", version: 1, status: COMPLETE) { id } }"}"#
            let (received, _) = try await Self.converse(
                client, dialect: "graphql-ws",
                messages: [
                    Self.initMessage(token),
                    #"{"type":"start","id":"1","payload":{"query":"subscription { taskUpdated { id status version } }"}}"#,
                    #"{"type":"start","id":"2","payload":\#(update)}"#,
                ],
                until: { messages in messages.contains { $0["type"] as? String == "data" && $0["id"] as? String == "1" } }
            )
            #expect(received.first?["type"] as? String == "connection_ack")
            #expect(received.contains { $0["type"] as? String == "ka" })
            let event = try #require(received.first { $0["type"] as? String == "data" && $0["id"] as? String == "1" })
            let updated = ((event["payload"] as? [String: Any])?["data"] as? [String: Any])?["taskUpdated"] as? [String: Any]
            #expect(updated?["id"] as? String == created)
            #expect(updated?["status"] as? String == "COMPLETE")
            #expect(updated?["version"] as? Int == 2)

            let (stopped, _) = try await Self.converse(
                client, dialect: "graphql-ws",
                messages: [Self.initMessage(token), #"{"type":"start","id":"7","payload":\#(Self.subscribeToAdded)}"#, #"{"type":"stop","id":"7"}"#],
                until: { messages in messages.contains { $0["type"] as? String == "complete" } }
            )
            #expect(stopped.last?["id"] as? String == "7")
        }
    }

    @Test func invalidSubscriptionsAreRefusedInEachDialectsWay() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let bad = #"{"query":"subscription { taskRemoved { id } }"}"#
            let (modern, _) = try await Self.converse(
                client, dialect: "graphql-transport-ws",
                messages: [Self.initMessage(token), #"{"type":"subscribe","id":"x","payload":\#(bad)}"#],
                until: { $0.contains { $0["type"] as? String == "error" } }
            )
            let errors = try #require(modern.last?["payload"] as? [[String: Any]])
            #expect((errors.first?["message"] as? String)?.contains("taskRemoved") == true)

            let (legacy, _) = try await Self.converse(
                client, dialect: "graphql-ws",
                messages: [Self.initMessage(token), #"{"type":"start","id":"x","payload":\#(bad)}"#],
                until: { $0.contains { $0["type"] as? String == "complete" } }
            )
            let data = try #require(legacy.first { $0["type"] as? String == "data" })
            #expect(((data["payload"] as? [String: Any])?["errors"] as? [Any])?.isEmpty == false)
        }
    }

    @Test func theSocketKeepsTheSameRulesAsHTTPAndSpeaksPersistedQueries() async throws {
        let harness = try await TestHarness { $0.graphQLIntrospection = false }
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let introspection = #"{"query":"{ __schema { queryType { name } } }"}"#
            let (refused, _) = try await Self.converse(
                client, dialect: "graphql-transport-ws",
                messages: [Self.initMessage(token), #"{"type":"subscribe","id":"i","payload":\#(introspection)}"#],
                until: { $0.contains { $0["type"] as? String == "error" } }
            )
            let errors = try #require(refused.last?["payload"] as? [[String: Any]])
            #expect((errors.first?["extensions"] as? [String: Any])?["code"] as? String == "INTROSPECTION_DISABLED")

            // A hash alone is asked for its query; with the query it runs; then the hash alone runs.
            let query = "{ allTasks { id } }"
            let hash = SHA256.hash(data: Data(query.utf8)).map { String(format: "%02x", $0) }.joined()
            let persisted = #"{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"\#(hash)"}}}"#
            let registering = #"{"query":"\#(query)","extensions":{"persistedQuery":{"version":1,"sha256Hash":"\#(hash)"}}}"#
            // One socket each, in turn: subscriptions on one socket run side by side, so a registration sent after a
            // miss on the same socket may land first.
            func run(_ id: String, _ payload: String) async throws -> [[String: Any]] {
                try await Self.converse(
                    client, dialect: "graphql-transport-ws",
                    messages: [Self.initMessage(token), #"{"type":"subscribe","id":"\#(id)","payload":\#(payload)}"#],
                    until: { $0.contains { ["error", "complete"].contains($0["type"] as? String) } }
                ).0
            }
            let missed = try await run("miss", persisted)
            let miss = try #require(missed.first { $0["id"] as? String == "miss" && $0["type"] as? String == "error" }, "\(missed)")
            #expect(((miss["payload"] as? [[String: Any]])?.first?["extensions"] as? [String: Any])?["code"] as? String == "PERSISTED_QUERY_NOT_FOUND")
            let registered = try await run("register", registering)
            #expect(registered.contains { $0["id"] as? String == "register" && $0["type"] as? String == "next" }, "\(registered)")
            let hit = try await run("hit", persisted)
            #expect(hit.contains { $0["id"] as? String == "hit" && $0["type"] as? String == "next" }, "\(hit)")
        }
    }

    @Test func withoutASessionTheSocketIsRefused() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (_, modernClose) = try await Self.converse(
                client, dialect: "graphql-transport-ws", messages: [Self.initMessage("not-a-token")], until: { _ in false }
            )
            #expect(modernClose?.closeCode == .unknown(4403))

            let (legacy, _) = try await Self.converse(
                client, dialect: "graphql-ws", messages: [#"{"type":"connection_init","payload":{}}"#], until: { _ in false }
            )
            #expect(legacy.first?["type"] as? String == "connection_error")

            // Subscribing before connection_init is a protocol error in graphql-transport-ws.
            let (_, early) = try await Self.converse(
                client, dialect: "graphql-transport-ws",
                messages: [#"{"type":"subscribe","id":"1","payload":\#(Self.subscribeToAdded)}"#], until: { _ in false }
            )
            #expect(early?.closeCode == .unknown(4401))
        }
    }

    /// (A page of our own opening a socket with the cookie is in the interop tests: this client adds its own Origin.)
    @Test func theSessionCookieDoesNotCountFromAnotherSite() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (token, _) = try await signIn(client)
            let (_, foreign) = try await Self.converse(
                client, dialect: "graphql-transport-ws", headers: [.cookie: "foyer_session=\(token)", .origin: "https://evil.example"],
                messages: [#"{"type":"connection_init"}"#], until: { _ in false }
            )
            #expect(foreign?.closeCode == .unknown(4403))
        }
    }

    @Test func anUpgradeWithoutAKnownSubprotocolIsTold() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/graphql", method: .get, headers: [.upgrade: "websocket", .secWebSocketProtocol: "mqtt"]) { response in
                #expect(response.status == .badRequest)
                #expect(response.text.contains("graphql-transport-ws"))
            }
        }
    }

    /// Over a real connection the upgrade itself is refused, with the same words as the route's.
    @Test func anUpgradeOfferingNeitherDialectIsRefusedOnTheWire() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let answer = try await RawConnection.exchange(
                port: client.port!,
                "GET /graphql HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
            )
            #expect(answer.status == 400)
            #expect(answer.body.contains("graphql-transport-ws"))
            #expect(answer.header("connection") == "close")
            #expect(answer.closed)
        }
    }

    /// A shared result is framed once for every socket with the same dialect and id, as a whole websocket frame
    /// written past NIO's encoder: NIO's decoder reads it as the envelope, at each length encoding's edges.
    @Test(arguments: [0, 125 - 35, 126 - 35, 65_535 - 35, 65_536 - 35])
    func aSharedResultIsAWholeFrameNIOReadsBack(payloadLength: Int) throws {
        let framing = GraphQLSocket.resultFraming(.transportWS, id: "a")
        let payload = ByteBuffer(string: String(repeating: "x", count: payloadLength))
        let expected = GraphQLSocket.envelope("next", id: "a", payload: payload)
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        try decoder.writeInbound(framing.frame(payload))
        let frame = try #require(try decoder.readInbound(as: WebSocketFrame.self))
        #expect(frame.fin && frame.opcode == .text)
        #expect(String(buffer: frame.data) == expected)
        #expect(frame.data.readableBytes == payloadLength + 35, "the lengths tried sit on the encodings' edges")
        #expect(framing.key == GraphQLSocket.resultFraming(.transportWS, id: "a").key)
        #expect(framing.key != GraphQLSocket.resultFraming(.legacy, id: "a").key)
        #expect(framing.key != GraphQLSocket.resultFraming(.transportWS, id: "a ").key)
    }
}
