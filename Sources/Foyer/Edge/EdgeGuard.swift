import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// The first handler of every client connection, reading its bytes before the HTTP decoder does: it follows
/// each request's framing (head, then a body by `Content-Length` or chunks) just closely enough to enforce the
/// edge's limits and timeouts, and steps aside for good once a connection asks to upgrade (websockets).
/// What it refuses it answers itself, with a status written at once and the connection closed.
final class EdgeGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    /// Never read: outbound writes only tell it a response has started.
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum Stage {
        /// Between requests: Hummingbird's idle timeout governs.
        case awaitingHead
        case head(HeadScan)
        case body(BodyFraming)
        /// Upgraded (or asked to be): bytes pass untouched.
        case through
        /// Answered and closing: nothing more is read.
        case refused
    }

    private enum BodyFraming {
        case length(remaining: Int)
        case chunkSize(size: Int, inExtension: Bool)
        case chunkData(remaining: Int)
        /// The line break after a chunk's data.
        case chunkEnd
        case trailers(lineLength: Int)
    }

    /// What of a request head has arrived.
    private struct HeadScan {
        var bytes = 0
        var lineLength = 0
        var headerCount = 0
        var inRequestLine = true
        var contentLength = 0
        var chunked = false
        var upgrade = false
        var wantsJSON = false
    }

    private let edge: Edge
    private var stage: Stage
    /// The start of a head's line that goes on in a later read, enough to read the few fields that matter here;
    /// one buffer for the connection's life.
    private var carried: [UInt8] = []
    private static let keptLineBytes = 512
    /// When the current deadline started: the head's first byte, or the body's last read.
    private var since: NIODeadline
    private var respondedSinceHead = false
    private var unwritableSince: NIODeadline?
    private var timer: Scheduled<Void>?
    private var counted = false

    init(edge: Edge) {
        self.edge = edge
        stage = .head(HeadScan())
        since = .now()
    }

    // MARK: Connections

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { opened(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        opened(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        if counted {
            counted = false
            edge.connections.closed()
        }
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    private func opened(_ context: ChannelHandlerContext) {
        guard !counted, !isRefused else { return }
        guard edge.connections.open() else {
            // Over the cap: closed at once, not left waiting for a slot.
            stage = .refused
            context.close(promise: nil)
            return
        }
        counted = true
        since = .now()
        armTimer(context)
    }

    private var isRefused: Bool {
        if case .refused = stage { return true }
        return false
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch stage {
        case .through:
            context.fireChannelRead(data)
            return
        case .refused:
            return
        default:
            break
        }
        let buffer = unwrapInboundIn(data)
        if let refusal = follow(buffer) {
            refuse(refusal, context: context)
            return
        }
        context.fireChannelRead(data)
        armTimer(context)
    }

    /// Moves through the buffer's bytes; the refusal, if they break a limit.
    private func follow(_ buffer: ByteBuffer) -> EdgeRefusal? {
        buffer.withUnsafeReadableBytes { bytes -> EdgeRefusal? in
            var index = 0
            while index < bytes.count {
                switch stage {
                case .awaitingHead:
                    stage = .head(HeadScan())
                    since = .now()
                    respondedSinceHead = false
                case .head(var scan):
                    // Line by line: a line wholly in this buffer is read where it is; only one that goes on in a
                    // later read is carried (its first 512 bytes, all that is read of any line).
                    var ended = false
                    while index < bytes.count, !ended {
                        let rest = bytes[index...]
                        let newline = rest.firstIndex(of: UInt8(ascii: "\n"))
                        let segment = bytes[index..<(newline ?? bytes.count)]
                        scan.bytes += segment.count + (newline == nil ? 0 : 1)
                        scan.lineLength += segment.count
                        if scan.inRequestLine, scan.lineLength > EdgeSettings.maximumRequestLineBytes {
                            return .uriTooLong(json: carried.isEmpty ? Self.requestLineWantsJSON(segment) : Self.requestLineWantsJSON(carried[...]))
                        }
                        if scan.bytes > EdgeSettings.maximumHeadBytes { return .headTooLarge(json: scan.wantsJSON) }
                        guard let newline else {
                            carried.append(contentsOf: segment.prefix(Self.keptLineBytes - carried.count))
                            index = bytes.count
                            break
                        }
                        index = newline + 1
                        let outcome: LineOutcome
                        if carried.isEmpty {
                            outcome = endLine(segment, &scan)
                        } else {
                            carried.append(contentsOf: segment.prefix(Self.keptLineBytes - carried.count))
                            outcome = endLine(carried[...], &scan)
                            carried.removeAll(keepingCapacity: true)
                        }
                        switch outcome {
                        case .more: break
                        case .ended: ended = true
                        case .refused(let refusal): return refusal
                        }
                    }
                    if ended { headEnded(scan) } else { stage = .head(scan) }
                case .body(let framing):
                    since = .now()
                    index = consumeBody(framing, bytes, from: index)
                case .through, .refused:
                    return nil
                }
            }
            return nil
        }
    }

    private enum LineOutcome {
        case more, ended
        case refused(EdgeRefusal)
    }

    /// A line of the head ended (its `\n` read): `line` is its start, without the `\n`.
    private func endLine<Line: RandomAccessCollection<UInt8>>(_ whole: Line, _ scan: inout HeadScan) -> LineOutcome {
        let line = whole.last == UInt8(ascii: "\r") ? whole.dropLast() : whole[...]
        let empty = line.isEmpty && scan.lineLength <= 1
        defer { scan.lineLength = 0 }
        if scan.inRequestLine {
            // Empty lines before a request line are allowed (RFC 9112 §2.2).
            if empty { return .more }
            scan.inRequestLine = false
            scan.wantsJSON = Self.requestLineWantsJSON(line)
            return .more
        }
        if empty { return .ended }
        scan.headerCount += 1
        if scan.headerCount > EdgeSettings.maximumHeaderCount { return .refused(.tooManyHeaders(json: scan.wantsJSON)) }
        read(field: line, into: &scan)
        return .more
    }

    private func headEnded(_ scan: HeadScan) {
        if scan.upgrade {
            stage = .through
        } else if scan.chunked {
            stage = .body(.chunkSize(size: 0, inExtension: false))
        } else if scan.contentLength > 0 {
            stage = .body(.length(remaining: scan.contentLength))
        } else {
            stage = .awaitingHead
        }
        since = .now()
    }

    /// Reads the few fields that matter here; other fields cost a comparison of their name's bytes, no allocation.
    private func read<Line: RandomAccessCollection<UInt8>>(field line: Line, into scan: inout HeadScan) {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = line[..<colon]
        let field: Field
        if Self.named(name, "content-length") {
            field = .contentLength
        } else if Self.named(name, "transfer-encoding") {
            field = .transferEncoding
        } else if Self.named(name, "upgrade") {
            field = .upgrade
        } else if Self.named(name, "accept") {
            field = .accept
        } else {
            return
        }
        let value = String(decoding: line[line.index(after: colon)...], as: UTF8.self)[...].trimmingEnds { $0 == " " || $0 == "\t" }.lowercased()
        switch field {
        case .contentLength: scan.contentLength = Int(value) ?? 0
        case .transferEncoding: scan.chunked = value.contains("chunked")
        case .upgrade: scan.upgrade = !value.isEmpty
        case .accept:
            if value.contains("application/json"), !value.contains("text/html") { scan.wantsJSON = true }
        }
    }

    private enum Field { case contentLength, transferEncoding, upgrade, accept }

    /// A field name equal to `lowercased`, in any letter case.
    private static func named<Name: Collection<UInt8>>(_ name: Name, _ lowercased: StaticString) -> Bool {
        guard name.count == lowercased.utf8CodeUnitCount else { return false }
        return lowercased.withUTF8Buffer { expected in
            zip(name, expected).allSatisfy { byte, wanted in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 == wanted : byte == wanted
            }
        }
    }

    /// As `Request.wantsJSON` reads a path: the API, `.json` routes and `/graphql` answer in JSON.
    private static func requestLineWantsJSON<Line: Collection<UInt8>>(_ line: Line) -> Bool {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return false }
        let target = line[line.index(after: space)...]
        let end = target.firstIndex(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "?") }) ?? target.endIndex
        let path = target[..<end]
        func starts(_ prefix: StaticString) -> Bool {
            prefix.withUTF8Buffer { path.starts(with: $0) }
        }
        func ends(_ suffix: StaticString) -> Bool {
            suffix.withUTF8Buffer { path.count >= $0.count && path.suffix($0.count).elementsEqual($0) }
        }
        return starts("/api/") || ends(".json") || (path.count == 8 && starts("/graphql"))
    }

    /// Skips a body's bytes, following its framing; where it ends the next request's head begins.
    private func consumeBody(_ framing: BodyFraming, _ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        var index = start
        var framing = framing
        while index < bytes.count {
            switch framing {
            case .length(let remaining):
                let taken = min(remaining, bytes.count - index)
                index += taken
                if remaining - taken == 0 {
                    stage = .awaitingHead
                    return index
                }
                framing = .length(remaining: remaining - taken)
            case .chunkSize(let size, let inExtension):
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "\n") {
                    framing = size == 0 ? .trailers(lineLength: 0) : .chunkData(remaining: size)
                } else if inExtension || byte == UInt8(ascii: "\r") {
                    continue
                } else if byte == UInt8(ascii: ";") {
                    framing = .chunkSize(size: size, inExtension: true)
                } else if let digit = Self.hexValue(byte) {
                    // Sizes past a few GiB are the decoder's to refuse; this only needs to keep counting.
                    framing = .chunkSize(size: size < (1 << 40) ? size * 16 + digit : size, inExtension: false)
                }
            case .chunkData(let remaining):
                let taken = min(remaining, bytes.count - index)
                index += taken
                framing = remaining - taken == 0 ? .chunkEnd : .chunkData(remaining: remaining - taken)
            case .chunkEnd:
                if bytes[index] == UInt8(ascii: "\n") { framing = .chunkSize(size: 0, inExtension: false) }
                index += 1
            case .trailers(let lineLength):
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "\n") {
                    if lineLength == 0 {
                        stage = .awaitingHead
                        return index
                    }
                    framing = .trailers(lineLength: 0)
                } else if byte != UInt8(ascii: "\r") {
                    framing = .trailers(lineLength: lineLength + 1)
                }
            }
        }
        stage = .body(framing)
        return index
    }

    private static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): Int(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): Int(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): Int(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    // MARK: Writing

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        respondedSinceHead = true
        context.write(data, promise: promise)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        unwritableSince = context.channel.isWritable ? nil : .now()
        armTimer(context)
        context.fireChannelWritabilityChanged()
    }

    // MARK: Deadlines

    /// The moment something must have happened by, if anything must.
    private var deadline: NIODeadline? {
        var deadline: NIODeadline?
        switch stage {
        case .head, .body: deadline = since + edge.headerTimeout
        case .awaitingHead, .through, .refused: break
        }
        if let unwritableSince, !isThrough {
            let unread = unwritableSince + edge.headerTimeout
            deadline = deadline.map { min($0, unread) } ?? unread
        }
        return deadline
    }

    private var isThrough: Bool {
        if case .through = stage { return true }
        return false
    }

    /// One timer per connection, moved only when it would fire too early: most reads change nothing.
    private func armTimer(_ context: ChannelHandlerContext) {
        guard timer == nil, let deadline else { return }
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            timer = nil
            expire(context)
        }
    }

    private func expire(_ context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        if let unwritableSince, !isThrough, now >= unwritableSince + edge.headerTimeout {
            // The client stopped reading what it asked for.
            stage = .refused
            context.close(promise: nil)
            return
        }
        switch stage {
        case .head(let scan) where now >= since + edge.headerTimeout:
            // Silent since it connected, or a head still unfinished: nothing to answer or a 408.
            if scan.bytes == 0 && !respondedSinceHead && scan.inRequestLine {
                stage = .refused
                context.close(promise: nil)
            } else {
                refuse(.requestTimeout(json: scan.wantsJSON), context: context)
            }
        case .body where now >= since + edge.headerTimeout:
            if respondedSinceHead {
                stage = .refused
                context.close(promise: nil)
            } else {
                refuse(.requestTimeout(json: false), context: context)
            }
        default:
            armTimer(context)
        }
    }

    private func refuse(_ refusal: EdgeRefusal, context: ChannelHandlerContext) {
        stage = .refused
        timer?.cancel()
        timer = nil
        edge.refused(refusal)
        context.writeAndFlush(wrapOutboundOut(edge.answer(refusal))).whenComplete { _ in
            context.close(promise: nil)
        }
    }
}


/// Closes the connection once a response that says `Connection: close` is written: an early answer such as a
/// `413` leaves the rest of the request's body unread, and Hummingbird would otherwise wait for it to drain.
final class CloseAfterResponse: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private var closing = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let response):
            closing = response.headerFields[.connection]?.lowercased() == "close"
            context.write(data, promise: promise)
        case .end where closing:
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            context.writeAndFlush(data, promise: written)
            written.futureResult.whenComplete { _ in context.close(promise: nil) }
        case .body, .end:
            context.write(data, promise: promise)
        }
    }
}
