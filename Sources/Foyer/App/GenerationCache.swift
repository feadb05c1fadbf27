/// Values derived from the database, each kept until the data it came from changes: an entry made at
/// generation N serves only while the source's write counter still reads N. Read the generation before
/// computing, so a write that lands during the computation leaves the new entry already stale.
final class GenerationCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry {
        let generation: Int
        let value: Value
    }

    /// Keys come from requests (page numbers, hosts): bound them rather than trust them.
    private let entries: StartOverCache<Key, Entry>

    init(capacity: Int) {
        entries = StartOverCache(maximumCost: capacity)
    }

    func value(for key: Key, generation: Int, make: () async throws -> Value) async throws -> Value {
        if let entry = entries.value(for: key), entry.generation == generation {
            return entry.value
        }
        let value = try await make()
        entries.keep(Entry(generation: generation, value: value), for: key)
        return value
    }
}
