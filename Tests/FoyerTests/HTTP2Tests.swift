import HTTPTypes
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

@testable import Foyer
@testable import FoyerServer

/// Each HTTP/2 stream's rules. (HTTP/2 itself, its limits and attacks, are tested with a raw h2 client against the real
/// binary: Tests/Interop/test_http2.py.)
@Suite struct HTTP2Tests {
    /// HTTP/2 forbids the fields about the connection (RFC 9113 §8.2.2): a drain's or a refusal's `Connection: close`
    /// would make NIO reset the stream; everything else passes.
    @Test func responsesLoseTheFieldsAboutTheConnection() throws {
        let stream = EmbeddedChannel(handler: HTTP2StreamRules(timeout: .seconds(30)))
        let fields: HTTPFields = [.connection: "close", .transferEncoding: "chunked", HTTPField.Name("Keep-Alive")!: "timeout=5", .contentType: "text/plain"]
        try stream.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok, headerFields: fields)))
        guard case .head(let written) = try #require(try stream.readOutbound(as: HTTPResponsePart.self)) else {
            Issue.record("expected the response's head")
            return
        }
        #expect(written.headerFields == [.contentType: "text/plain"])
        _ = try stream.finish()
    }

    /// The flushes of streams answered in one turn of the loop go out once, at its end: their answers share a TLS
    /// record and a write. A close sends what was written before it.
    @Test func flushesAskedInOneTurnOfTheLoopGoOutTogetherAtItsEnd() throws {
        let loop = EmbeddedEventLoop()
        let connection = EmbeddedChannel(handler: CoalescedFlushes(), loop: loop)
        connection.write(ByteBuffer(string: "first stream"), promise: nil)
        connection.flush()
        connection.write(ByteBuffer(string: "second stream"), promise: nil)
        connection.flush()
        #expect(try connection.readOutbound(as: ByteBuffer.self) == nil, "nothing goes out before the turn ends")
        loop.run()
        #expect(try connection.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "first stream"))
        #expect(try connection.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "second stream"))
        #expect(try connection.readOutbound(as: ByteBuffer.self) == nil)

        connection.write(ByteBuffer(string: "before the close"), promise: nil)
        connection.flush()
        try connection.close().wait()
        #expect(try connection.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "before the close"))
    }

    /// A request body that stops for the timeout resets the stream; one that keeps coming does not, and a request
    /// whose end came with its head sets no clock at all.
    @Test func aBodyThatPausesForTheTimeoutResetsTheStream() throws {
        let loop = EmbeddedEventLoop()
        let stream = EmbeddedChannel(handler: HTTP2StreamRules(timeout: .seconds(2)), loop: loop)
        try stream.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        try stream.writeInbound(HTTPRequestPart.head(HTTPRequest(method: .get, scheme: "https", authority: "a", path: "/")))
        try stream.writeInbound(HTTPRequestPart.end(nil))
        loop.advanceTime(by: .seconds(5))
        #expect(stream.isActive, "a request that ended has no clock")

        try stream.writeInbound(HTTPRequestPart.head(HTTPRequest(method: .post, scheme: "https", authority: "a", path: "/api/v1/posts")))
        stream.pipeline.fireChannelReadComplete()
        loop.advanceTime(by: .milliseconds(1500))
        try stream.writeInbound(HTTPRequestPart.body(ByteBuffer(string: "some")))
        stream.pipeline.fireChannelReadComplete()
        loop.advanceTime(by: .milliseconds(1500))
        #expect(stream.isActive, "the body moved within the timeout")
        loop.advanceTime(by: .milliseconds(600))
        #expect(!stream.isActive, "2 s without the body moving")
    }
}
