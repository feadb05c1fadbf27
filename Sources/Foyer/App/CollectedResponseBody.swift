import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

extension ResponseBody {
    /// The whole body in one buffer, written as it would be to the connection (`expecting`: its length, if known).
    /// For answers that are read before they are sent: compressed, or kept under an Idempotency-Key.
    func collected(expecting length: Int = 0) async throws -> ByteBuffer {
        let collector = Collector(capacity: length)
        try await write(collector)
        return collector.buffer.withLockedValue { $0 }
    }

    /// Writes go into one buffer instead of the connection.
    private struct Collector: ResponseBodyWriter {
        let buffer: NIOLockedValueBox<ByteBuffer>

        init(capacity: Int) {
            buffer = NIOLockedValueBox(ByteBufferAllocator().buffer(capacity: capacity))
        }

        mutating func write(_ part: ByteBuffer) async throws {
            _ = buffer.withLockedValue { $0.writeImmutableBuffer(part) }
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}
