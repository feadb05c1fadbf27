import NIOConcurrencyHelpers

/// Values kept by key until together they cost more than `maximumCost` (entries, characters, bytes: the caller
/// says what one costs); then it starts over, which costs computing each value once more and nothing else. For
/// keys that repeat (page numbers, query texts, file versions) and may come from requests, so must be bounded.
final class StartOverCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let state = NIOLockedValueBox((entries: [Key: Value](), cost: 0))
    private let maximumCost: Int

    init(maximumCost: Int) {
        self.maximumCost = maximumCost
    }

    func value(for key: Key) -> Value? {
        state.withLockedValue { $0.entries[key] }
    }

    func keep(_ value: Value, for key: Key, cost: Int = 1) {
        state.withLockedValue { state in
            if state.cost + cost > maximumCost {
                state.entries.removeAll(keepingCapacity: true)
                state.cost = 0
            }
            if state.entries.updateValue(value, forKey: key) == nil { state.cost += cost }
        }
    }

    /// The value kept for `key`, or else `make`'s, kept at what `cost` says it costs. Two callers asking at once may
    /// both make it; one of the two equal values is kept.
    func value(for key: Key, orMake make: () throws -> Value, cost: (Value) -> Int = { _ in 1 }) rethrows -> Value {
        if let kept = value(for: key) { return kept }
        let made = try make()
        keep(made, for: key, cost: cost(made))
        return made
    }

    /// Its cost is not given back: the cache starts over a little sooner.
    func remove(_ key: Key) {
        state.withLockedValue { _ = $0.entries.removeValue(forKey: key) }
    }
}
