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
        if let value = cached(key, generation: generation) { return value }
        let value = try await make()
        keep(value, for: key, generation: generation)
        return value
    }

    /// The value kept for `key` while `generation` is current; nil when there is none.
    func cached(_ key: Key, generation: Int) -> Value? {
        guard let entry = entries.value(for: key), entry.generation == generation else { return nil }
        return entry.value
    }

    /// For values only some are kept: made at `generation`, read before they were.
    func keep(_ value: Value, for key: Key, generation: Int) {
        entries.keep(Entry(generation: generation, value: value), for: key)
    }
}
