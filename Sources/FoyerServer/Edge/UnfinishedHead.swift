import Hummingbird
import NIOCore

/// The reads of a head NIO's decoder has not finished, kept (not copied) only while it is under way, and read
/// only when it is refused: NIO's errors do not say which limit a head broke, nor which format its client reads.
/// Nothing here decides where a request begins or whether it is answered; at worst a refusal is worded less well.
struct UnfinishedHead {
    private var reads: [ByteBuffer] = []
    /// The reads begin inside a body begun earlier: its bytes in them, counted until its request ends.
    private var bodyFirst: (bytes: Int, ended: Bool)?
    /// Requests the decoder finished within the kept reads, ahead of the unfinished head.
    private var ahead: [(chunked: Bool, bodyBytes: Int)] = []

    /// A read that begins while no head is under way: the next head begins in it.
    mutating func start(_ read: ByteBuffer) {
        clear()
        reads.append(read)
    }

    /// A read that begins inside a body: a head may follow it.
    mutating func startInBody(_ read: ByteBuffer) {
        start(read)
        bodyFirst = (0, false)
    }

    mutating func append(_ read: ByteBuffer) {
        if !reads.isEmpty { reads.append(read) }
    }

    mutating func bodyArrived(_ bytes: Int) {
        if let first = bodyFirst, !first.ended { bodyFirst = (first.bytes + bytes, false) }
    }

    mutating func requestEnded(chunked: Bool, bodyBytes: Int) {
        guard !reads.isEmpty else { return }
        if let first = bodyFirst, !first.ended {
            // Where a chunked body ends in these bytes only the decoder knows.
            if chunked { clear() } else { bodyFirst = (first.bytes, true) }
        } else {
            ahead.append((chunked, bodyBytes))
        }
    }

    mutating func clear() {
        reads.removeAll(keepingCapacity: true)
        ahead.removeAll(keepingCapacity: true)
        bodyFirst = nil
    }

    /// Whether bytes of another head follow the requests the kept reads ended.
    var goesOn: Bool {
        guard let bytes = keptBytes(), let start = start(in: bytes) else { return false }
        return start < bytes.endIndex
    }

    /// Which limit the head broke (`overflowed`: NIO's `headerOverflow`), else that it is malformed; worded for
    /// the client its request line names. `otherwiseJSON` where the head cannot be found.
    func refusal(overflowed: Bool, otherwiseJSON: Bool) -> EdgeRefusal {
        guard let head = headBytes() else {
            return overflowed ? .headTooLarge(json: otherwiseJSON) : .malformed(json: otherwiseJSON)
        }
        let lines = Lines(head)
        let json = lines.wantsJSON
        guard overflowed else { return .malformed(json: json) }
        guard lines.requestLineEnded, lines.requestLine.count <= EdgeSettings.maximumRequestLineBytes else { return .uriTooLong(json: json) }
        return lines.fields.count > EdgeSettings.maximumHeaderCount ? .tooManyHeaders(json: json) : .headTooLarge(json: json)
    }

    /// Whether the unfinished head's client reads JSON, as far as it has come.
    func wantsJSON(otherwise: Bool) -> Bool {
        headBytes().map { Lines($0).wantsJSON } ?? otherwise
    }

    /// A head's lines, without their line breaks.
    private struct Lines {
        var requestLine: ArraySlice<UInt8>
        var requestLineEnded: Bool
        var fields: [ArraySlice<UInt8>] = []

        init(_ head: ArraySlice<UInt8>) {
            var lines = head.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
                line.last == UInt8(ascii: "\r") ? line.dropLast() : line
            }
            requestLineEnded = lines.count > 1
            requestLine = lines.removeFirst()
            fields = Array(lines.prefix { !$0.isEmpty })
        }

        var wantsJSON: Bool {
            let accept = fields.last { field in
                guard let colon = field.firstIndex(of: UInt8(ascii: ":")) else { return false }
                return String(decoding: field[..<colon], as: UTF8.self).lowercased() == "accept"
            }
            let acceptValue = accept.map { String(decoding: $0, as: UTF8.self).lowercased() }
            return UnfinishedHead.wantsJSON(requestLine: requestLine, accept: acceptValue)
        }
    }

    /// The unfinished head's bytes: the kept reads less what came ahead of it (nil where that is not known).
    private func headBytes() -> ArraySlice<UInt8>? {
        guard let bytes = keptBytes(), let start = start(in: bytes) else { return nil }
        return Array(bytes[start...])[...]
    }

    private func keptBytes() -> ByteBufferView? {
        guard var whole = reads.first else { return nil }
        for var read in reads.dropFirst() { whole.writeBuffer(&read) }
        return whole.readableBytesView
    }

    /// Where the unfinished head begins in `bytes`: past the end of a body begun earlier and the requests ahead.
    private func start(in bytes: ByteBufferView) -> Int? {
        var index = bytes.startIndex
        if let first = bodyFirst {
            guard first.ended else { return nil }
            index += first.bytes
        }
        for request in ahead {
            guard !request.chunked, index <= bytes.endIndex, let end = Self.headEnd(in: bytes, from: Self.skippingLineBreaks(bytes, from: index)) else {
                return nil
            }
            index = end + request.bodyBytes
        }
        return index <= bytes.endIndex ? Self.skippingLineBreaks(bytes, from: index) : nil
    }

    /// Empty lines before a request line are allowed (RFC 9112 §2.2).
    private static func skippingLineBreaks(_ bytes: ByteBufferView, from start: Int) -> Int {
        var index = start
        while index < bytes.endIndex, bytes[index] == UInt8(ascii: "\r") || bytes[index] == UInt8(ascii: "\n") { index += 1 }
        return index
    }

    /// Just past the empty line that ends a head begun at `start`.
    private static func headEnd(in bytes: ByteBufferView, from start: Int) -> Int? {
        var index = start
        while index < bytes.endIndex, let newline = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) {
            var next = newline + 1
            if next < bytes.endIndex, bytes[next] == UInt8(ascii: "\r") { next += 1 }
            if next < bytes.endIndex, bytes[next] == UInt8(ascii: "\n") { return next + 1 }
            index = newline + 1
        }
        return nil
    }

    /// As `Request.wantsJSON` reads a request, from its request line's bytes.
    static func wantsJSON<Line: Collection<UInt8>>(requestLine line: Line, accept: String?) -> Bool {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return wantsJSON(requestTarget: EmptyCollection(), accept: accept) }
        return wantsJSON(requestTarget: line[line.index(after: space)...], accept: accept)
    }

    /// `accept` lowercased.
    static func wantsJSON<Target: Collection<UInt8>>(requestTarget target: Target, accept: String?) -> Bool {
        let end = target.firstIndex(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "?") }) ?? target.endIndex
        return Request.wantsJSON(path: String(decoding: target[..<end], as: UTF8.self), accept: accept)
    }
}
