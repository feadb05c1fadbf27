import FoyerServer
import HTTPTypes
import Logging
import NIOConcurrencyHelpers

/// How a request is followed into the upstreams: its `X-Request-Id` and its W3C trace context (the caller's
/// `traceparent` continued, or a new trace). Task-local, so every upstream call made while serving the request
/// (GraphQL over HTTP and websocket, Keycloak) and every log line written meanwhile can name it without each
/// layer passing it on.
struct RequestTrace: Sendable {
    @TaskLocal static var current: RequestTrace?

    let requestID: String
    /// 32 lowercase hex digits, shared by every span of the trace.
    let traceID: String
    /// 16 hex digits naming this server's span: the parent of each upstream call.
    let spanID: String
    /// The caller's trace flags (sampled or not); ours say sampled, since every request is logged.
    let flags: String
    /// The caller's vendor entries, passed on unchanged as the specification asks of a participant.
    let traceState: String?

    var traceparent: String { "00-\(traceID)-\(spanID)-\(flags)" }

    init(requestID: String, traceparent: String?, traceState: String?) {
        self.requestID = requestID
        spanID = Self.hex(Self.ids.next())
        if let caller = traceparent.flatMap(Self.parse) {
            (traceID, flags) = caller
            self.traceState = traceState
        } else {
            traceID = Self.hex(Self.ids.next(), Self.ids.next())
            flags = "01"
            self.traceState = nil
        }
    }

    /// The trace a request asks for: its own sane `X-Request-Id` (else `fallbackID`) and its `traceparent`, if valid.
    init(continuing headers: HTTPFields, fallbackID: @autoclosure () -> String) {
        self.init(
            requestID: Self.acceptableID(headers.value(.xRequestID)) ?? fallbackID(),
            traceparent: headers.value(.traceparent), traceState: headers.value(.tracestate)
        )
    }

    /// A client's request id is used when it is short and plain enough to put in a log line and a header.
    static func acceptableID(_ value: String?) -> String? {
        guard let value, !value.isEmpty, value.count <= 128,
            value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.:".contains($0)) })
        else { return nil }
        return value
    }

    /// 32 hex digits, as Hummingbird's request ids were.
    static func newRequestID() -> String { hex(ids.next(), ids.next()) }

    /// Ids need to be unique, not secret: a fast generator seeded once from the system's, instead of a
    /// getrandom system call for each of the three 64-bit numbers every request takes.
    private static let ids = IDGenerator()

    private final class IDGenerator: Sendable {
        private let state = NIOLockedValueBox(UInt64.random(in: 1...UInt64.max))

        /// wyrand: never 0, so no id is all zeros.
        func next() -> UInt64 {
            while true {
                let seed = state.withLockedValue { state in
                    state &+= 0xa076_1d64_78bd_642f
                    return state
                }
                let product = seed.multipliedFullWidth(by: seed ^ 0xe703_7ed1_a0b4_28db)
                let value = product.high ^ product.low
                if value != 0 { return value }
            }
        }
    }

    /// The headers an upstream call carries.
    var headerPairs: [(String, String)] {
        [("X-Request-Id", requestID), ("traceparent", traceparent)] + (traceState.map { [("tracestate", $0)] } ?? [])
    }

    var logMetadata: Logger.Metadata {
        ["request_id": .string(requestID), "trace_id": .string(traceID), "span_id": .string(spanID)]
    }

    /// Log lines written while serving a request name it, whichever logger writes them.
    static let metadataProvider = Logger.MetadataProvider { current?.logMetadata ?? [:] }

    /// Trace id and flags of a valid `traceparent` (W3C Trace Context, level 1); nil for anything else, which
    /// starts a new trace instead. Versions above 00 are read as 00, with anything after the flags ignored.
    static func parse(_ value: String) -> (traceID: String, flags: String)? {
        let parts = value.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, isHex(parts[0]), parts[0] != "ff",
            parts[0] != "00" || parts.count == 4,
            parts[1].count == 32, isHex(parts[1]), parts[1].contains(where: { $0 != "0" }),
            parts[2].count == 16, isHex(parts[2]), parts[2].contains(where: { $0 != "0" }),
            parts[3].count == 2, isHex(parts[3])
        else { return nil }
        return (String(parts[1]), String(parts[3]))
    }

    private static func isHex(_ text: Substring) -> Bool {
        text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// 16 lowercase hex digits for `first`, 16 more for `second` if given: written straight into the string, its
    /// only allocation (a 32-digit id made of two 16-digit strings joined took five).
    private static func hex(_ first: UInt64, _ second: UInt64? = nil) -> String {
        let count = second == nil ? 16 : 32
        return String(unsafeUninitializedCapacity: count) { digits in
            func write(_ value: UInt64, at offset: Int) {
                for position in 0..<16 {
                    let nibble = UInt8(truncatingIfNeeded: value >> UInt64(60 - 4 * position)) & 0xF
                    digits[offset + position] = nibble < 10 ? 0x30 + nibble : 0x57 + nibble
                }
            }
            write(first, at: 0)
            if let second { write(second, at: 16) }
            return count
        }
    }
}

extension HTTPField.Name {
    static let traceparent = HTTPField.Name("traceparent")!
    static let tracestate = HTTPField.Name("tracestate")!
}
