import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import Synchronization

/// What the edge refuses, each with the status a client gets (in JSON or HTML, as far as its head said which).
enum EdgeRefusal: Hashable, Sendable {
    case requestTimeout(json: Bool)
    case uriTooLong(json: Bool)
    case headTooLarge(json: Bool)
    case tooManyHeaders(json: Bool)

    var status: HTTPResponse.Status {
        switch self {
        case .requestTimeout: .requestTimeout
        case .uriTooLong: .uriTooLong
        case .headTooLarge, .tooManyHeaders: .requestHeaderFieldsTooLarge
        }
    }

    var json: Bool {
        switch self {
        case .requestTimeout(let json), .uriTooLong(let json), .headTooLarge(let json), .tooManyHeaders(let json): json
        }
    }

    var message: String {
        switch self {
        case .requestTimeout: "The request did not arrive in time."
        case .uriTooLong: "The request's URL is longer than \(EdgeSettings.maximumRequestLineBytes / 1024) KiB."
        case .headTooLarge: "The request's headers are larger than \(EdgeSettings.maximumHeadBytes / 1024) KiB together."
        case .tooManyHeaders: "The request has more than \(EdgeSettings.maximumHeaderCount) header fields."
        }
    }

    var metricsReason: String {
        switch self {
        case .requestTimeout: "timeout"
        case .uriTooLong: "uri_too_long"
        case .headTooLarge: "head_too_large"
        case .tooManyHeaders: "too_many_headers"
        }
    }

    static let all: [EdgeRefusal] = [true, false].flatMap { json in
        [.requestTimeout(json: json), .uriTooLong(json: json), .headTooLarge(json: json), .tooManyHeaders(json: json)]
    }
}

/// Open client connections, against the cap.
final class EdgeConnections: Sendable {
    let cap: Int
    private let count = Atomic<Int>(0)
    /// The most open at once since `takePeak` last asked.
    private let peak = Atomic<Int>(0)
    private let metrics: FoyerMetrics

    init(cap: Int, metrics: FoyerMetrics) {
        self.cap = cap
        self.metrics = metrics
    }

    /// Counts a new connection; false (and counted as refused) when that would pass the cap.
    func open() -> Bool {
        let now = count.add(1, ordering: .relaxed).newValue
        guard now <= cap else {
            count.subtract(1, ordering: .relaxed)
            metrics.refusedConnections.increment()
            return false
        }
        metrics.openConnections.increment()
        var seen = peak.load(ordering: .relaxed)
        while now > seen {
            let (raised, found) = peak.compareExchange(expected: seen, desired: now, ordering: .relaxed)
            if raised { break }
            seen = found
        }
        return true
    }

    /// The most connections open at once since the last call, and how many are open now (the next peak starts there).
    func takePeak() -> (peak: Int, open: Int) {
        let open = count.load(ordering: .relaxed)
        return (max(peak.exchange(open, ordering: .relaxed), open), open)
    }

    func closed() {
        count.subtract(1, ordering: .relaxed)
        metrics.openConnections.decrement()
    }
}

/// The edge of one application: its settings, its open connections, and the answers to what it refuses, each
/// made once at start (pages included).
final class Edge: Sendable {
    let headerTimeout: TimeAmount
    let idleTimeout: TimeAmount
    let connections: EdgeConnections
    private let answers: [EdgeRefusal: ByteBuffer]
    private let metrics: FoyerMetrics

    init(settings: EdgeSettings, metrics: FoyerMetrics, views: Views) {
        headerTimeout = .nanoseconds(Int64(settings.headerTimeout.seconds * 1e9))
        idleTimeout = .nanoseconds(Int64(settings.idleTimeout.seconds * 1e9))
        connections = EdgeConnections(cap: settings.connectionCap, metrics: metrics)
        self.metrics = metrics
        answers = Dictionary(uniqueKeysWithValues: EdgeRefusal.all.map { refusal in
            (refusal, Self.answer(refusal, views: views))
        })
    }

    func answer(_ refusal: EdgeRefusal) -> ByteBuffer { answers[refusal]! }

    func refused(_ refusal: EdgeRefusal) { metrics.edgeRefusal(refusal.metricsReason) }

    /// A whole HTTP/1.1 response, `Connection: close`: the connection ends after it.
    private static func answer(_ refusal: EdgeRefusal, views: Views) -> ByteBuffer {
        let status = refusal.status
        var body = ByteBuffer()
        let contentType: String
        if refusal.json {
            contentType = "application/json; charset=utf-8"
            body.writeString(#"{"error":"\#(refusal.message)"}"#)
        } else {
            contentType = "text/html; charset=utf-8"
            body = views.standalonePage("errors/show", ["title": status.reasonPhrase, "status": status.code, "message": refusal.message], title: status.reasonPhrase)
        }
        var head = "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n"
        head += "Content-Type: \(contentType)\r\nContent-Length: \(body.readableBytes)\r\nConnection: close\r\nCache-Control: no-store\r\n"
        for field in SecurityHeaderFields.everywhere { head += "\(field.name): \(field.value)\r\n" }
        if !refusal.json {
            for field in views.pageSecurityFields { head += "\(field.name): \(field.value)\r\n" }
        }
        var buffer = ByteBuffer(string: head + "\r\n")
        buffer.writeBuffer(&body)
        return buffer
    }
}

/// Hummingbird's HTTP/1.1 channel with websocket upgrades, with the edge's guard in front of each connection.
struct EdgeGuardedChannel<Wrapped: ServerChildChannel>: ServerChildChannel {
    typealias Value = Wrapped.Value
    let wrapped: Wrapped
    let edge: Edge

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        do {
            try channel.pipeline.syncOperations.addHandler(EdgeGuard(edge: edge), position: .first)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return wrapped.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await wrapped.handle(value: value, logger: logger)
    }
}
