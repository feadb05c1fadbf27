import CZlib
import CompressNIO
import NIOConcurrencyHelpers
import NIOCore

/// Deflated bytes that may sit anywhere among others in one gzip member: deflated on their own (nothing in them
/// refers to bytes before them) and ending on a byte boundary without the final bit (a sync flush). Their CRC-32
/// and length let a member's trailer be worked out without reading them again.
struct DeflatedPiece: Sendable {
    let deflated: ByteBuffer
    let crc: UInt32
    let length: Int
}

/// Makes `DeflatedPiece`s with one zlib stream, reset between pieces (a stream's state is about 256 KB, which
/// `deflateInit2` allocates and the first pieces fault in). Used by one caller at a time: whoever made it, or took it
/// from `PieceDeflaters`.
final class PieceDeflater: @unchecked Sendable {
    private let compressor: ZlibCompressor

    init(level: Int32) throws {
        compressor = try ZlibCompressor(algorithm: .deflate, configuration: .init(compressionLevel: level))
    }

    func piece(_ text: String) throws -> DeflatedPiece {
        var bytes = ByteBuffer(string: text)
        let crc = GzipMember.crc(of: bytes, after: 0)
        let length = bytes.readableBytes
        try compressor.reset()
        var deflated = ByteBufferAllocator().buffer(capacity: compressor.maxSize(from: bytes))
        try compressor.deflate(from: &bytes, to: &deflated, flush: .sync)
        // zlib finished the flush only if it read everything and left room: otherwise the piece would end short.
        guard bytes.readableBytes == 0, deflated.writableBytes > 0 else { throw CompressNIOError.bufferOverflow }
        return DeflatedPiece(deflated: deflated, crc: crc, length: length)
    }
}

/// Deflaters kept for pieces made per request (a page's body), so that no request makes a zlib stream of its own.
final class PieceDeflaters: Sendable {
    let level: Int32
    /// Idle ones kept at most: pages deflated at once beyond it make and drop their own.
    let capacity: Int
    private let idle = NIOLockedValueBox<[PieceDeflater]>([])

    init(level: Int32, capacity: Int) {
        self.level = level
        self.capacity = capacity
    }

    func piece(_ text: String) throws -> DeflatedPiece {
        let deflater = try idle.withLockedValue { $0.popLast() } ?? PieceDeflater(level: level)
        // One that failed is dropped rather than kept: its stream is in whatever state zlib left it.
        let piece = try deflater.piece(text)
        idle.withLockedValue { idle in
            if idle.count < capacity { idle.append(deflater) }
        }
        return piece
    }
}

/// One gzip member (RFC 1952) joined from pieces deflated ahead and from per-request values written as stored
/// blocks, which needs no compressor at all: a page whose layout and body were deflated once is sent compressed for
/// the cost of copying it.
struct GzipMember {
    private var out: ByteBuffer
    private var crc: UInt32 = 0
    private var length = 0

    init(capacity: Int) {
        out = ByteBufferAllocator().buffer(capacity: capacity + 32)
        // The magic, deflate, no flags, no modification time, no extra flags, made on an unknown system.
        out.writeBytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])
    }

    mutating func append(_ piece: DeflatedPiece) {
        out.writeImmutableBuffer(piece.deflated)
        crc = UInt32(truncatingIfNeeded: crc32_combine(uLong(crc), uLong(piece.crc), off_t(piece.length)))
        length += piece.length
    }

    /// The readable bytes of `bytes` as they are, in stored blocks of at most 65,535 bytes each.
    mutating func appendStored(_ bytes: ByteBuffer) {
        crc = Self.crc(of: bytes, after: crc)
        length += bytes.readableBytes
        var rest = bytes
        while let block = rest.readSlice(length: min(rest.readableBytes, Int(UInt16.max))), block.readableBytes > 0 {
            // At a byte boundary: not final, stored (the byte's other five bits are padding), then LEN and NLEN.
            out.writeInteger(UInt8(0))
            out.writeInteger(UInt16(block.readableBytes), endianness: .little)
            out.writeInteger(~UInt16(block.readableBytes), endianness: .little)
            out.writeImmutableBuffer(block)
        }
    }

    /// The member with its end: an empty final stored block, then the CRC-32 and the length of all it holds.
    consuming func finish() -> ByteBuffer {
        out.writeBytes([1, 0, 0, 0xFF, 0xFF])
        out.writeInteger(crc, endianness: .little)
        out.writeInteger(UInt32(truncatingIfNeeded: length), endianness: .little)
        return out
    }

    static func crc(of bytes: ByteBuffer, after crc: UInt32) -> UInt32 {
        bytes.withUnsafeReadableBytes { raw in
            guard let base = raw.baseAddress else { return crc }
            return UInt32(truncatingIfNeeded: crc32(uLong(crc), base.assumingMemoryBound(to: Bytef.self), uInt(raw.count)))
        }
    }
}

/// A page body rendered once and sent many times (the posts list), and its deflated form, made for the first
/// reader who accepts gzip.
final class RenderedBody: Sendable {
    let html: String
    private let deflated = NIOLockedValueBox<DeflatedPiece?>(nil)
    /// Made once for many readers, so as small as zlib makes it.
    static let level: Int32 = 9

    init(html: String) {
        self.html = html
    }

    func deflatedPiece() throws -> DeflatedPiece {
        if let made = deflated.withLockedValue({ $0 }) { return made }
        // Deflated outside the lock: two first readers at once both deflate, and neither waits for the other.
        let made = try PieceDeflater(level: Self.level).piece(html)
        deflated.withLockedValue { $0 = made }
        return made
    }
}
