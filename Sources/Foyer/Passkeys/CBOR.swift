import Foundation

/// A CBOR data item (RFC 8949), as much of it as WebAuthn sends: attestation objects and COSE keys. No package in
/// the machine's mirrors reads CBOR, so this small reader is Foyer's own. Lengths are definite, as CTAP2's canonical
/// encoding requires; an indefinite length, a reserved value or a length past the end is `CBORError`.
indirect enum CBOR: Equatable, Sendable {
    case unsigned(UInt64)
    /// -1 - n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    case map([Entry])
    case tagged(UInt64, CBOR)
    case bool(Bool)
    case null
    case undefined
    case simple(UInt8)
    case float(Double)

    struct Entry: Equatable, Sendable {
        let key: CBOR
        let value: CBOR
    }

    /// The value under `key` in a map (nil for anything else, or a missing key).
    subscript(key: CBOR) -> CBOR? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == key }?.value
    }

    subscript(key: Int) -> CBOR? { self[CBOR(key)] }
    subscript(key: String) -> CBOR? { self[.text(key)] }

    init(_ integer: Int) {
        self = integer >= 0 ? .unsigned(UInt64(integer)) : .negative(UInt64(-1 - integer))
    }

    /// An integer that fits in an `Int`.
    var int: Int? {
        switch self {
        case .unsigned(let value): value <= UInt64(Int.max) ? Int(value) : nil
        case .negative(let value): value <= UInt64(Int.max) ? -1 - Int(value) : nil
        default: nil
        }
    }

    var byteString: [UInt8]? { if case .bytes(let bytes) = self { bytes } else { nil } }
    var textString: String? { if case .text(let text) = self { text } else { nil } }

    /// Exactly one item filling `bytes`.
    static func decode(_ bytes: [UInt8]) throws -> CBOR {
        var reader = CBORReader(bytes)
        let item = try reader.read()
        guard reader.offset == bytes.count else { throw CBORError("\(bytes.count - reader.offset) bytes follow the CBOR item") }
        return item
    }
}

struct CBORError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Reads items one after another from `bytes` (authenticator data holds a COSE key followed by more).
struct CBORReader {
    /// Deeper nesting than any WebAuthn structure needs is refused, so a hostile input cannot exhaust the stack.
    static let maximumDepth = 16

    let bytes: [UInt8]
    private(set) var offset: Int

    init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    mutating func read() throws -> CBOR { try read(depth: 0) }

    private mutating func read(depth: Int) throws -> CBOR {
        guard depth <= Self.maximumDepth else { throw CBORError("CBOR nested deeper than \(Self.maximumDepth) levels") }
        let initial = try byte()
        let major = initial >> 5
        let info = initial & 0x1F
        if major == 7 { return try simpleOrFloat(info) }
        let argument = try self.argument(info)
        switch major {
        case 0: return .unsigned(argument)
        case 1: return .negative(argument)
        case 2: return .bytes(try take(argument))
        case 3:
            guard let text = String(validating: try take(argument), as: UTF8.self) else { throw CBORError("a CBOR text string is not UTF-8") }
            return .text(text)
        case 4:
            // Each item takes at least a byte: a count past what is left cannot be honest.
            guard argument <= UInt64(bytes.count - offset) else { throw CBORError("a CBOR array is longer than its input") }
            return .array(try (0..<Int(argument)).map { _ in try read(depth: depth + 1) })
        case 5:
            guard argument <= UInt64(bytes.count - offset) / 2 else { throw CBORError("a CBOR map is longer than its input") }
            return .map(try (0..<Int(argument)).map { _ in CBOR.Entry(key: try read(depth: depth + 1), value: try read(depth: depth + 1)) })
        default:
            return .tagged(argument, try read(depth: depth + 1))
        }
    }

    private mutating func byte() throws -> UInt8 {
        guard offset < bytes.count else { throw CBORError("the CBOR input ends inside an item") }
        defer { offset += 1 }
        return bytes[offset]
    }

    private mutating func take(_ count: UInt64) throws -> [UInt8] {
        guard count <= UInt64(bytes.count - offset) else { throw CBORError("a CBOR string is longer than its input") }
        defer { offset += Int(count) }
        return Array(bytes[offset..<offset + Int(count)])
    }

    private mutating func unsigned(bytes count: Int) throws -> UInt64 {
        try take(UInt64(count)).reduce(0) { $0 << 8 | UInt64($1) }
    }

    private mutating func argument(_ info: UInt8) throws -> UInt64 {
        switch info {
        case 0..<24: return UInt64(info)
        case 24: return try unsigned(bytes: 1)
        case 25: return try unsigned(bytes: 2)
        case 26: return try unsigned(bytes: 4)
        case 27: return try unsigned(bytes: 8)
        case 31: throw CBORError("indefinite-length CBOR is not used by WebAuthn")
        default: throw CBORError("reserved CBOR additional information \(info)")
        }
    }

    private mutating func simpleOrFloat(_ info: UInt8) throws -> CBOR {
        switch info {
        case 20: return .bool(false)
        case 21: return .bool(true)
        case 22: return .null
        case 23: return .undefined
        case 0..<20: return .simple(info)
        case 24:
            let value = try byte()
            guard value >= 32 else { throw CBORError("a two-byte CBOR simple value below 32") }
            return .simple(value)
        case 25: return .float(Double(halfPrecision(UInt16(try unsigned(bytes: 2)))))
        case 26: return .float(Double(Float(bitPattern: UInt32(try unsigned(bytes: 4)))))
        case 27: return .float(Double(bitPattern: try unsigned(bytes: 8)))
        case 31: throw CBORError("a CBOR break outside an indefinite-length item")
        default: throw CBORError("reserved CBOR additional information \(info)")
        }
    }
}

/// IEEE 754 half precision, as RFC 8949 Appendix D decodes it (Float16 is not available on every platform).
private func halfPrecision(_ half: UInt16) -> Double {
    let exponent = Int(half >> 10) & 0x1F
    let mantissa = Double(half & 0x3FF)
    let value: Double = switch exponent {
    case 0: mantissa * pow(2, -24)
    case 31: mantissa == 0 ? .infinity : .nan
    default: (mantissa + 1024) * pow(2, Double(exponent - 25))
    }
    return half & 0x8000 != 0 ? -value : value
}
