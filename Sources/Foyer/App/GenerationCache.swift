import NIOConcurrencyHelpers

/// Values derived from the database, each kept until the data it came from changes: an entry made at
/// generation N serves only while the source's write counter still reads N. Read the generation before
/// computing, so a write that lands during the computation leaves the new entry already stale.
final class GenerationCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry {
        let generation: Int
        let value: Value
    }

    private let entries = NIOLockedValueBox([Key: Entry]())
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    func value(for key: Key, generation: Int, make: () async throws -> Value) async throws -> Value {
        if let entry = entries.withLockedValue({ $0[key] }), entry.generation == generation {
            return entry.value
        }
        let value = try await make()
        entries.withLockedValue { entries in
            // Keys come from requests (page numbers, hosts): bound them rather than trust them.
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(generation: generation, value: value)
        }
        return value
    }
}
