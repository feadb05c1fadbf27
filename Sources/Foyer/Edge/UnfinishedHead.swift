import NIOCore

/// The reads of a head NIO's decoder has not finished, kept (not copied) only while it is under way, and read
/// only when it is refused: NIO's errors do not say which limit a head broke, nor which format its client reads.
/// Nothing here decides where a request begins or whether it is answered; at worst a refusal is worded less well.
struct UnfinishedHead {
    private var reads: [ByteBuffer] = []
    /// Requests the decoder finished within the kept reads, ahead of the unfinished head.
    private var ahead: [(chunked: Bool, bodyBytes: Int)] = []

    /// A read that begins while no head is under way: the next head begins in it.
    mutating func start(_ read: ByteBuffer) {
        clear()
        reads.append(read)
    }

    mutating func append(_ read: ByteBuffer) {
        if !reads.isEmpty { reads.append(read) }
    }

    mutating func requestEnded(chunked: Bool, bodyBytes: Int) {
        if !reads.isEmpty { ahead.append((chunked, bodyBytes)) }
    }

    mutating func clear() {
        reads.removeAll(keepingCapacity: true)
        ahead.removeAll(keepingCapacity: true)
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

    /// The unfinished head's bytes: the kept reads less the requests ahead of it (nil where one was chunked, whose
    /// end only the decoder knows).
    private func headBytes() -> ArraySlice<UInt8>? {
        guard !reads.isEmpty else { return nil }
        var bytes: [UInt8] = []
        for read in reads { bytes.append(contentsOf: read.readableBytesView) }
        var index = 0
        for request in ahead {
            guard !request.chunked, let end = Self.headEnd(in: bytes, from: Self.skippingLineBreaks(bytes, from: index)) else { return nil }
            index = end + request.bodyBytes
            guard index <= bytes.count else { return nil }
        }
        return bytes[Self.skippingLineBreaks(bytes, from: index)...]
    }

    /// Empty lines before a request line are allowed (RFC 9112 §2.2).
    private static func skippingLineBreaks(_ bytes: [UInt8], from start: Int) -> Int {
        var index = start
        while index < bytes.count, bytes[index] == UInt8(ascii: "\r") || bytes[index] == UInt8(ascii: "\n") { index += 1 }
        return index
    }

    /// Just past the empty line that ends a head begun at `start`.
    private static func headEnd(in bytes: [UInt8], from start: Int) -> Int? {
        var index = start
        while let newline = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) {
            var next = newline + 1
            if next < bytes.count, bytes[next] == UInt8(ascii: "\r") { next += 1 }
            if next < bytes.count, bytes[next] == UInt8(ascii: "\n") { return next + 1 }
            index = newline + 1
        }
        return nil
    }

    /// As `Request.wantsJSON` reads a request: the API, `.json` routes and `/graphql` answer in JSON, and so does
    /// anything asked for with `Accept: application/json` (not beside `text/html`).
    static func wantsJSON<Line: Collection<UInt8>>(requestLine line: Line, accept: String?) -> Bool {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return wantsJSON(requestTarget: EmptyCollection(), accept: accept) }
        return wantsJSON(requestTarget: line[line.index(after: space)...], accept: accept)
    }

    /// `accept` lowercased.
    static func wantsJSON<Target: Collection<UInt8>>(requestTarget target: Target, accept: String?) -> Bool {
        if let accept, accept.contains("application/json"), !accept.contains("text/html") { return true }
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
}
