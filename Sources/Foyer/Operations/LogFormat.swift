import Foundation
import Logging
import Synchronization

/// How log lines are written to standard error: swift-log's plain text for people, or one JSON object per line
/// for log shippers (`--log-format json`). Either way, lines written while serving a request name its
/// `request_id`, `trace_id` and `span_id`.
public enum LogFormat: String, Sendable, CaseIterable {
    case text, json

    /// Installs the format for every logger of the process; call once, before anything logs.
    public func bootstrap() {
        switch self {
        case .text:
            LoggingSystem.bootstrap({ label, provider in TextLogHandler(label: label, metadataProvider: provider) },
                                    metadataProvider: RequestTrace.metadataProvider)
        case .json:
            LoggingSystem.bootstrap({ label, provider in JSONLogHandler(label: label, metadataProvider: provider) },
                                    metadataProvider: RequestTrace.metadataProvider)
        }
    }
}

/// swift-log's `StreamLogHandler` line, byte for byte (`2026-11-27T01:00:00+0000 info foyer: request_id=… [Foyer] GET
/// /up 200 0.1ms`), written for less: the timestamp is made once a second instead of by `localtime` and `strftime` on
/// every line, metadata from one source is not merged into a copy, and the pairs go straight into the line. With the
/// stream handler the access log line was about 5 % of a proxied GraphQL request's CPU.
struct TextLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    private static let output = StandardErrorLines()
    private static let clock = LocalSecondClock()

    init(label: String, metadataProvider: Logger.MetadataProvider?) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        Self.output.emit(line(event, at: Self.clock.now()))
    }

    /// The line for `event`, stamped `timestamp`; what is kept of the metadata is as `StreamLogHandler` keeps it:
    /// the handler's, then the provider's, then the event's own, a later one winning on a key.
    func line(_ event: LogEvent, at timestamp: String) -> String {
        var fields = metadata
        func add(_ source: Logger.Metadata?) {
            guard let source, !source.isEmpty else { return }
            if fields.isEmpty { fields = source } else { fields.merge(source) { _, later in later } }
        }
        add(metadataProvider?.get())
        add(event.metadata)
        if let error = event.error {
            fields["error.message"] = "\(error)"
            fields["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        let message = event.message.description
        // Room for the whole line at once: grown append by append, it was reallocated three or four times.
        var line = ""
        line.reserveCapacity(timestamp.utf8.count + label.utf8.count + message.utf8.count + 40 + fields.count * 56)
        line += timestamp
        line += " "
        line += event.level.rawValue
        if !label.isEmpty { line += " " }
        line += label
        line += ":"
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            line += " "
            line += key
            line += "="
            line += value.description
        }
        line += " ["
        line += event.source
        line += "] "
        line += message
        line += "\n"
        return line
    }
}

/// Local time to the second as `StreamLogHandler` writes it (`%Y-%m-%dT%H:%M:%S%z`), formatted once per second.
final class LocalSecondClock: Sendable {
    private let last = Mutex<(second: time_t, text: String)>((-1, ""))

    func now() -> String {
        let second = time(nil)
        if let text = last.withLock({ $0.second == second ? $0.text : nil }) { return text }
        let text = Self.format(second)
        last.withLock { $0 = (second, text) }
        return text
    }

    static func format(_ second: time_t) -> String {
        var second = second
        var parts = tm()
        guard localtime_r(&second, &parts) != nil else { return "<unknown>" }
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// `{"time":"2026-11-22T10:00:00.123Z","level":"info","label":"foyer","message":"…","request_id":"…",…}`:
/// metadata at the top level, as Loki, Elasticsearch and CloudWatch expect; nested values as their text.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    private static let output = StandardErrorLines()

    init(label: String, metadataProvider: Logger.MetadataProvider?) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = metadata
        if let provided = metadataProvider?.get() { fields.merge(provided) { explicit, _ in explicit } }
        if let given = event.metadata { fields.merge(given) { _, given in given } }
        var line = "{\"time\":\"\(Self.timestamp())\",\"level\":\"\(event.level.rawValue)\",\"label\":"
        JSONString.append(label, to: &line)
        line += ",\"message\":"
        JSONString.append(event.message.description, to: &line)
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) where !["time", "level", "label", "message"].contains(key) {
            line += ","
            JSONString.append(key, to: &line)
            line += ":"
            JSONString.append(value.description, to: &line)
        }
        line += "}\n"
        Self.output.emit(line)
    }

    /// UTC with milliseconds, without a formatter (or the C library's time-zone lock) on every line.
    static func timestamp(_ date: Date = Date()) -> String {
        let seconds = date.timeIntervalSince1970
        let time = UTCTime(date)
        let milliseconds = Int((seconds - seconds.rounded(.down)) * 1000)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = milliseconds < 10 ? "00\(milliseconds)" : milliseconds < 100 ? "0\(milliseconds)" : "\(milliseconds)"
        return "\(time.year)-\(two(time.month))-\(two(time.day))T\(two(time.hour)):\(two(time.minute)):\(two(time.second)).\(millis)Z"
    }
}

/// Whole lines to standard error, one writer at a time, so lines from two threads never interleave.
private final class StandardErrorLines: @unchecked Sendable {
    private let lock = NSLock()

    func emit(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        var line = line
        line.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }
}
