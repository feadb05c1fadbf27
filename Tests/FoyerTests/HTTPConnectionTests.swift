import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import Foyer

/// Foyer's HTTP/1 loop, and the live stream that takes its connection over.
@Suite struct HTTPConnectionTests {
    /// Once a stream's opening is written its connection belongs to the stream (no task reads it any more): events
    /// still come, anything the client sends closes it, and the stream is counted out when it goes.
    @Test func aStreamTakesItsConnectionOver() async throws {
        try await EdgeTests.harness { $0.edge.headerTimeout = .seconds(5); $0.edge.idleTimeout = .seconds(5) }.test(.live) { client in
            let (token, _) = try await signIn(client)
            let path = try await client.execute(uri: "/posts", method: .get) { response in
                try #require(response.text.firstMatch(of: /src="(\/streams\/[^"]+)"/)).1
            }
            let stream = try await RawConnection.open(port: client.port!)
            // A request answered first: the stream is the second on its connection.
            let first = try await stream.send("GET /up HTTP/1.1\r\nHost: x\r\n\r\n", until: "\r\n\r\nOK")
            #expect(first.hasPrefix("HTTP/1.1 200"))
            let opening = try await stream.send("GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n", until: ": posts\n\n")
            #expect(opening.contains("text/event-stream"))
            try await eventually { try await Self.openStreams(client) == 1 }

            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(json: #"{"title": "While taken over", "content": "x"}"#)
            ) { response in #expect(response.status == .created) }
            #expect(try await stream.send("", until: "While taken over").contains("data: "))

            // A request sent on a stream's connection is not answered: the connection closes.
            let after = try await stream.send("GET /up HTTP/1.1\r\nHost: x\r\n\r\n", readingToEndWithin: .seconds(2))
            #expect(after.closed)
            #expect(!after.text.contains("HTTP/1.1 200"))
            try await eventually { try await Self.openStreams(client) == 0 }
        }
    }

    static func openStreams(_ client: some TestClientProtocol) async throws -> Int {
        try await client.execute(uri: "/metrics", method: .get) { response in
            let line = response.text.split(separator: "\n").first { $0.hasPrefix("foyer_live_event_streams_open ") }
            return Int(Double(line?.split(separator: " ").last ?? "") ?? -1)
        }
    }
}
