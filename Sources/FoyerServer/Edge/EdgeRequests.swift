import NIOCore
import NIOHTTP1

/// Sits right after NIO's HTTP decoder on every client connection and holds each request to the edge's rules by
/// what the decoder parsed: its errors become answers (`431`, `414`, `400`), its events move the clocks (the header
/// timeout runs until a `head`, the body timeout between body parts), and what HTTP/1.x asks of a server beyond
/// parsing is done here (HTTP/1.0 closes, HTTP/1.1 needs `Host`, an `Upgrade` nobody serves is ignored).
/// Its own answers go through NIO's encoder after every response ahead of them, then the connection closes.
final class EdgeRequests: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private enum Stage {
        /// A new connection with nothing read yet: its first head is due within the header timeout.
        case opened(since: NIODeadline)
        /// Between requests: Hummingbird's idle timeout governs.
        case idle
        /// Bytes have come since `since` and the decoder has not finished a head.
        case head(since: NIODeadline)
        /// The decoder gave the head; the body last moved at `lastMoved`, until the request's end.
        case body(lastMoved: NIODeadline)
        /// NIO's upgrader answered `101`: what follows is not HTTP.
        case upgraded
        /// Refused or closing: nothing more is read.
        case closing
    }

    private let edge: Edge
    private let tap: EdgeTap
    /// Nil where no websocket is served.
    private let upgrades: KeptAliveUpgrade?
    private var stage: Stage
    private var unfinished = UnfinishedHead()
    /// The request under way (or the last one), as far as its head said.
    private var current = (target: "", accept: String?.none, chunked: false, bodyBytes: 0)
    /// Heads the decoder finished, and those of them handed on to the routes.
    private var requestCount = 0
    private var requestsHandedOn = 0
    /// Requests handed on whose response has not ended, and whether one has begun.
    private var unanswered = 0
    private var answering = false
    /// A refusal waiting for the responses ahead of it: written when `unanswered` falls to `after`.
    private var pending: (refusal: EdgeRefusal, after: Int)?
    /// The last request handed on closes the connection once answered; nothing after it is read.
    private var closeWhenAnswered = false
    /// The decoder stops at the end of an upgrade request; whatever comes next belongs to the upgraded protocol.
    private var upgradeRequested = false
    private var inboundPassesThrough = false
    /// The read the decoder is reading, while it does.
    private var arriving: (bytes: ByteBuffer, at: NIODeadline, requestsEnded: Int)?
    private var unwritableSince: NIODeadline?
    private var timer: Scheduled<Void>?
    /// This handler's place in the pipeline, for the clocks the tap's calls move.
    private var context: ChannelHandlerContext?

    init(edge: Edge, tap: EdgeTap, upgrades: KeptAliveUpgrade?) {
        self.edge = edge
        self.tap = tap
        self.upgrades = upgrades
        stage = .opened(since: .now())
    }

    // MARK: The connection

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        tap.requests = self
        stage = .opened(since: .now())
        armTimer(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        timer?.cancel()
        timer = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        tap.requests = nil
        self.context = nil
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        unwritableSince = context.channel.isWritable ? nil : .now()
        armTimer(context)
        context.fireChannelWritabilityChanged()
    }

    // MARK: Bytes, as the tap sees them arrive

    /// A read is about to reach the decoder.
    func bytesArrive(_ bytes: ByteBuffer) {
        if inboundPassesThrough { return }
        let now = NIODeadline.now()
        arriving = (bytes, now, requestsEnded: 0)
        switch stage {
        case .opened(let since):
            // A connection's first head is due within the header timeout of its opening.
            stage = .head(since: since)
            unfinished.start(bytes)
        case .idle:
            stage = .head(since: now)
            unfinished.start(bytes)
        case .head:
            unfinished.append(bytes)
        case .body:
            stage = .body(lastMoved: now)
            unfinished.startInBody(bytes)
        case .upgraded, .closing:
            break
        }
    }

    /// The decoder has read it: a head it finished is no longer kept, unless the read goes on past the requests
    /// it ended: then a pipelined head has begun, and its clock with it.
    func bytesRead() {
        guard let read = arriving else { return }
        arriving = nil
        if case .idle = stage, !inboundPassesThrough, read.requestsEnded > 0, pipelinedHeadFollows(read.bytes) {
            stage = .head(since: read.at)
        }
        if case .head = stage {
            if let context { armTimer(context) }
        } else {
            unfinished.clear()
        }
    }

    private func pipelinedHeadFollows(_ read: ByteBuffer) -> Bool {
        // A request without a body ends in an empty line, and so would any head after it the decoder finished.
        if current.bodyBytes == 0, !current.chunked { return !Self.endsInEmptyLine(read) }
        return unfinished.goesOn
    }

    private static func endsInEmptyLine(_ bytes: ByteBuffer) -> Bool {
        let end = bytes.writerIndex
        guard bytes.readableBytes >= 2, bytes.getInteger(at: end - 1, as: UInt8.self) == UInt8(ascii: "\n") else { return false }
        let before = bytes.getInteger(at: end - 2, as: UInt8.self)
        if before == UInt8(ascii: "\n") { return true }
        return before == UInt8(ascii: "\r") && bytes.readableBytes >= 3 && bytes.getInteger(at: end - 3, as: UInt8.self) == UInt8(ascii: "\n")
    }

    // MARK: What the decoder parsed

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if inboundPassesThrough {
            context.fireChannelRead(data)
            return
        }
        switch stage {
        case .closing, .upgraded: return
        default: break
        }
        switch unwrapInboundIn(data) {
        case .head(var head):
            let chunked = head.headers.first(name: "transfer-encoding").map { $0.lowercased().hasSuffix("chunked") } ?? false
            current = (head.uri, head.headers.first(name: "accept"), chunked, 0)
            stage = .body(lastMoved: arriving?.at ?? .now())
            requestCount += 1
            if let refusal = refusal(of: head) {
                refuse(refusal, context: context, handedOn: false)
                return
            }
            keepToHTTP1(&head)
            unanswered += 1
            requestsHandedOn += 1
            context.fireChannelRead(wrapInboundOut(.head(head)))
        case .body(let bytes):
            current.bodyBytes += bytes.readableBytes
            unfinished.bodyArrived(bytes.readableBytes)
            stage = .body(lastMoved: arriving?.at ?? .now())
            context.fireChannelRead(data)
        case .end:
            unfinished.requestEnded(chunked: current.chunked, bodyBytes: current.bodyBytes)
            arriving?.requestsEnded += 1
            stage = .idle
            context.fireChannelRead(data)
            if closeWhenAnswered {
                stage = .closing
                tap.closing = true
            } else if upgradeRequested {
                inboundPassesThrough = true
            }
        }
        armTimer(context)
    }

    /// What a parsed head breaks that the decoder's limits do not cover.
    private func refusal(of head: HTTPRequestHead) -> EdgeRefusal? {
        // The method, the target and the version, with the spaces between them.
        let requestLine = head.method.rawValue.utf8.count + head.uri.utf8.count + 10
        if requestLine > EdgeSettings.maximumRequestLineBytes { return .uriTooLong(json: currentWantsJSON) }
        if head.version.major == 1, head.version.minor >= 1, head.headers.count(named: "host") != 1 {
            return .missingHost(json: currentWantsJSON)
        }
        return nil
    }

    /// Whether the request under way (or the last one) reads its errors as JSON.
    private var currentWantsJSON: Bool {
        UnfinishedHead.wantsJSON(requestTarget: current.target.utf8, accept: current.accept?.lowercased())
    }

    /// HTTP/1.0 without keep-alive closes after its answer (RFC 9112 §9.3); an upgrade nothing here serves is
    /// ignored and the request answered over HTTP/1.1 (RFC 9110 §7.8). NIO's decoder stops reading after a request
    /// it took for an upgrade, so such a connection closes after the answer.
    private func keepToHTTP1(_ head: inout HTTPRequestHead) {
        if head.version == .http1_0, !head.isKeepAlive {
            // Hummingbird ends a connection on exactly this.
            head.headers.replaceOrAdd(name: "connection", value: "close")
            closeWhenAnswered = true
        }
        guard head.headers.contains(name: "upgrade") || head.method == .CONNECT else { return }
        let upgrade = head.headers["upgrade"]
        let decoderStops = head.method == .CONNECT || head.headers[canonicalForm: "connection"].contains { $0.lowercased() == "upgrade" }
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? head.uri
        // NIO's upgrader looks at a connection's first request only; a later one is upgraded by `KeptAliveUpgrade`
        // when it offers all a websocket needs (else it is answered, and the connection closes).
        let served = decoderStops && head.method == .GET && upgrades?.webSockets.paths.contains(path) == true
            && upgrade.contains { $0.lowercased().contains("websocket") } && (requestCount == 1 || upgrades?.accepts(head) != nil)
        if served {
            upgradeRequested = true
            return
        }
        head.headers.remove(name: "upgrade")
        if decoderStops {
            head.headers.replaceOrAdd(name: "connection", value: "close")
            closeWhenAnswered = true
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard !inboundPassesThrough, let parserError = error as? HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        switch stage {
        case .closing, .upgraded:
            return
        case .body:
            // In the body or its trailers: the request was handed on, its answer is ours if none has begun.
            let json = currentWantsJSON
            let refusal: EdgeRefusal = parserError == .headerOverflow ? .trailersTooLarge(json: json) : .malformed(json: json)
            refuse(refusal, context: context, handedOn: true)
        case .opened, .idle, .head:
            refuse(unfinished.refusal(overflowed: parserError == .headerOverflow, otherwiseJSON: currentWantsJSON), context: context, handedOn: false)
        }
    }

    // MARK: Responses

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .upgraded = stage {
            context.write(data, promise: promise)
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(let response):
            answering = true
            if response.status == .switchingProtocols {
                upgraded(context)
            }
            context.write(data, promise: promise)
        case .body:
            context.write(data, promise: promise)
        case .end:
            answering = false
            unanswered -= 1
            if let pending, unanswered == pending.after {
                context.write(data, promise: promise)
                self.pending = nil
                writeAndClose(pending.refusal, context: context)
            } else if closeWhenAnswered, unanswered == 0 {
                let written = context.eventLoop.makePromise(of: Void.self)
                written.futureResult.cascade(to: promise)
                context.writeAndFlush(data, promise: written)
                written.futureResult.assumeIsolated().whenComplete { _ in self.close(context) }
            } else {
                context.write(data, promise: promise)
            }
        }
    }

    private func upgraded(_ context: ChannelHandlerContext) {
        stage = .upgraded
        inboundPassesThrough = true
        timer?.cancel()
        timer = nil
        tap.requests = nil
    }

    // MARK: Refusing

    /// Answers `refusal` after the responses ahead of it, then closes. `handedOn`: the refused request went on to
    /// the routes, whose answer this replaces if it has not begun.
    private func refuse(_ refusal: EdgeRefusal, context: ChannelHandlerContext, handedOn: Bool) {
        if case .closing = stage { return }
        stage = .closing
        tap.closing = true
        timer?.cancel()
        timer = nil
        let after = handedOn ? 1 : 0
        if handedOn, unanswered == 0 || (answering && unanswered == 1) {
            // Its own answer has begun, or ended early (a route need not read a body to answer): nothing can follow.
            close(context)
        } else if unanswered == after, !answering {
            writeAndClose(refusal, context: context)
        } else {
            pending = (refusal, after)
        }
    }

    private func writeAndClose(_ refusal: EdgeRefusal, context: ChannelHandlerContext) {
        // The decoder's last word on a connection already gone (a head cut short by the close) has no reader.
        guard context.channel.isActive else { return close(context) }
        edge.refused(refusal)
        let answer = edge.answer(refusal)
        context.write(wrapOutboundOut(.head(answer.head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(answer.body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            self.close(context)
        }
    }

    private func close(_ context: ChannelHandlerContext) {
        stage = .closing
        tap.closing = true
        timer?.cancel()
        timer = nil
        if requestsHandedOn == 0 {
            // NIO's upgrader still waits for a first request: told the input is over, it gives up quietly instead
            // of Hummingbird logging an error for every connection refused before its first request.
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
        context.close(promise: nil)
    }

    // MARK: Clocks

    /// The moment something must have happened by, if anything must.
    private var deadline: NIODeadline? {
        var deadline: NIODeadline?
        switch stage {
        case .opened(let since), .head(let since): deadline = since + edge.headerTimeout
        case .body(let lastMoved): deadline = lastMoved + edge.headerTimeout
        case .idle, .upgraded, .closing: break
        }
        if let unwritableSince, !isUpgraded {
            let unread = unwritableSince + edge.headerTimeout
            deadline = deadline.map { min($0, unread) } ?? unread
        }
        return deadline
    }

    private var isUpgraded: Bool {
        if case .upgraded = stage { return true }
        return false
    }

    /// One timer per connection, moved only when it would fire too early: most events change nothing.
    private func armTimer(_ context: ChannelHandlerContext) {
        guard timer == nil, let deadline else { return }
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            timer = nil
            expire(context)
        }
    }

    private func expire(_ context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        if let unwritableSince, !isUpgraded, now >= unwritableSince + edge.headerTimeout {
            // The client stopped reading what it asked for.
            close(context)
            return
        }
        switch stage {
        case .opened(let since) where now >= since + edge.headerTimeout:
            // Silent since it connected: nothing to answer.
            close(context)
        case .head(let since) where now >= since + edge.headerTimeout:
            refuse(.requestTimeout(json: unfinished.wantsJSON(otherwise: currentWantsJSON)), context: context, handedOn: false)
        case .body(let lastMoved) where now >= lastMoved + edge.headerTimeout:
            refuse(.requestTimeout(json: currentWantsJSON), context: context, handedOn: true)
        default:
            armTimer(context)
        }
    }
}

extension HTTPHeaders {
    /// Fields named `lowercasedName`, in any letter case, counted without copying them out.
    fileprivate func count(named lowercasedName: String) -> Int {
        var count = 0
        for (name, _) in self where name.utf8.count == lowercasedName.utf8.count && name.lowercased() == lowercasedName {
            count += 1
        }
        return count
    }
}
