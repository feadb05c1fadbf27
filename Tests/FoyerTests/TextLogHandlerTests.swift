import Foundation
import Logging
import Testing

@testable import Foyer

/// Foyer's text lines are swift-log's `StreamLogHandler` lines, byte for byte: whatever reads the one reads the other.
/// The stream handler writes only to the process's standard error, so its line is read back from there.
@Suite(.serialized) struct TextLogHandlerTests {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// `--log-format json` stamps lines in UTC with milliseconds.
    @Test func jsonLinesAreStampedInUTCWithMilliseconds() {
        #expect(JSONLogHandler.timestamp(Date(timeIntervalSince1970: 1_800_000_000.25)) == "2027-01-15T08:00:00.250Z")
        #expect(JSONLogHandler.timestamp(Date(timeIntervalSince1970: 951_782_400.5)) == "2000-02-29T00:00:00.500Z")
    }

    static let provider = Logger.MetadataProvider { ["request_id": "from-provider", "trace_id": "t"] }

    /// What `StreamLogHandler` writes for `event`, and the same event's `TextLogHandler` line stamped with the time it
    /// was written at. Tried again if a second ended between the two.
    static func bothLines(label: String, base: Logger.Metadata, provider: Logger.MetadataProvider?, _ event: LogEvent) throws -> (
        stream: String, text: String
    ) {
        var stream = StreamLogHandler.standardError(label: label, metadataProvider: provider)
        var text = TextLogHandler(label: label, metadataProvider: provider)
        for (key, value) in base {
            stream[metadataKey: key] = value
            text[metadataKey: key] = value
        }
        for _ in 0..<3 {
            let before = LocalSecondClock.format(time(nil))
            let written = try standardError { stream.log(event: event) }
            let ours = text.line(event, at: before)
            if LocalSecondClock.format(time(nil)) == before { return (written, ours) }
        }
        throw Failure(description: "three seconds ended while two lines were written")
    }

    /// What `body` writes to file descriptor 2 (other tests' lines meanwhile go there too; only ours is kept by the
    /// caller's label).
    static func standardError(_ body: () -> Void) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-stderr-\(UUID().uuidString)").path
        let file = open(path, O_CREAT | O_RDWR | O_TRUNC, 0o600)
        guard file >= 0 else { throw Failure(description: "cannot open \(path)") }
        defer {
            close(file)
            unlink(path)
        }
        let saved = dup(2)
        dup2(file, 2)
        body()
        dup2(saved, 2)
        close(saved)
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    static func event(_ level: Logger.Level, _ message: Logger.Message, metadata: Logger.Metadata?, error: (any Error)? = nil) -> LogEvent {
        LogEvent(level: level, message: message, error: error, metadata: metadata, source: "Foyer", file: #fileID, function: #function, line: #line)
    }

    @Test func aLineWithMetadataFromEverySourceIsTheStreamHandlersLine() throws {
        let label = "foyer-\(UUID().uuidString.prefix(8))"
        let lines = try Self.bothLines(
            label: label, base: ["zone": "base", "request_id": "from-base"], provider: Self.provider,
            Self.event(.info, "GET /up 200 0.1ms", metadata: ["request_id": "explicit", "span_id": .stringConvertible(42)])
        )
        let written = lines.stream.split(separator: "\n", omittingEmptySubsequences: false).first { $0.contains(" \(label):") }
        #expect(written.map { "\($0)\n" } == lines.text)
        #expect(lines.text.contains(" request_id=explicit span_id=42 trace_id=t zone=base [Foyer] GET /up 200 0.1ms\n"))
    }

    @Test func aLineWithoutMetadataOrLabelAndOneWithAnErrorAreTheStreamHandlersToo() throws {
        struct Broken: Error {}
        for (label, event) in [
            ("", Self.event(.warning, "no fields at all", metadata: nil)),
            ("foyer-\(UUID().uuidString.prefix(8))", Self.event(.error, "failed", metadata: [:], error: Broken())),
        ] {
            let lines = try Self.bothLines(label: label, base: [:], provider: nil, event)
            let marker = label.isEmpty ? " warning: [Foyer] no fields at all" : " \(label):"
            let written = lines.stream.split(separator: "\n", omittingEmptySubsequences: false).first { $0.contains(marker) }
            #expect(written.map { "\($0)\n" } == lines.text, "label \(label.isEmpty ? "(none)" : label)")
        }
    }

    @Test func theClockGivesOneTextPerSecond() {
        let clock = LocalSecondClock()
        let first = clock.now()
        let second = clock.now()
        #expect(first.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}/) != nil, "\(first)")
        #expect(first == second || LocalSecondClock.format(time(nil)) == second)
    }
}
