/// Values by key in the order they were last used: looking one up, adding, removing, and removing the least
/// recently used are O(1) (a doubly linked list through an array of slots, indexed by a dictionary), so their cost
/// does not grow with what is kept. Not thread-safe: its owner holds it under a lock.
struct RecencyList<Key: Hashable, Value> {
    fileprivate struct Slot {
        var key: Key
        /// Nil once the slot is free (its index is then in `free`).
        var value: Value?
        var newer: Int
        var older: Int
    }

    fileprivate static var none: Int { -1 }
    private var slots: [Slot] = []
    private var free: [Int] = []
    private var index: [Key: Int] = [:]
    private var newest = Self.none
    private var oldest = Self.none

    var count: Int { index.count }
    var isEmpty: Bool { index.isEmpty }

    /// The value for `key`, which becomes the most recently used.
    mutating func use(_ key: Key) -> Value? {
        guard let slot = index[key] else { return nil }
        moveToNewest(slot)
        return slots[slot].value
    }

    /// Keeps `value` for `key` as the most recently used; returns the value it replaces, if any.
    @discardableResult
    mutating func insert(_ value: Value, for key: Key) -> Value? {
        if let slot = index[key] {
            let previous = slots[slot].value
            slots[slot].value = value
            moveToNewest(slot)
            return previous
        }
        let slot: Int
        if let reused = free.popLast() {
            slot = reused
            slots[slot] = Slot(key: key, value: value, newer: Self.none, older: Self.none)
        } else {
            slot = slots.count
            slots.append(Slot(key: key, value: value, newer: Self.none, older: Self.none))
        }
        index[key] = slot
        linkAsNewest(slot)
        return nil
    }

    @discardableResult
    mutating func remove(_ key: Key) -> Value? {
        guard let slot = index.removeValue(forKey: key) else { return nil }
        return release(slot)
    }

    /// The least recently used entry, left in place.
    var leastRecentlyUsed: (key: Key, value: Value)? {
        guard oldest != Self.none, let value = slots[oldest].value else { return nil }
        return (slots[oldest].key, value)
    }

    @discardableResult
    mutating func removeLeastRecentlyUsed() -> (key: Key, value: Value)? {
        guard oldest != Self.none else { return nil }
        let key = slots[oldest].key
        index[key] = nil
        return release(oldest).map { (key, $0) }
    }

    /// Removes every entry `isRemoved` says so of, in one pass; returns their values.
    mutating func removeAll(where isRemoved: (Value) -> Bool) -> [Value] {
        var removed: [Value] = []
        var slot = oldest
        while slot != Self.none {
            let next = slots[slot].newer
            if let value = slots[slot].value, isRemoved(value) {
                index[slots[slot].key] = nil
                _ = release(slot)
                removed.append(value)
            }
            slot = next
        }
        return removed
    }

    /// Keys from the least to the most recently used.
    var keysByRecency: [Key] {
        var keys: [Key] = []
        var slot = oldest
        while slot != Self.none {
            keys.append(slots[slot].key)
            slot = slots[slot].newer
        }
        return keys
    }

    private mutating func release(_ slot: Int) -> Value? {
        unlink(slot)
        let value = slots[slot].value
        slots[slot].value = nil
        free.append(slot)
        return value
    }

    private mutating func moveToNewest(_ slot: Int) {
        guard slot != newest else { return }
        unlink(slot)
        linkAsNewest(slot)
    }

    private mutating func linkAsNewest(_ slot: Int) {
        slots[slot].older = newest
        slots[slot].newer = Self.none
        if newest != Self.none { slots[newest].newer = slot }
        newest = slot
        if oldest == Self.none { oldest = slot }
    }

    private mutating func unlink(_ slot: Int) {
        let (newer, older) = (slots[slot].newer, slots[slot].older)
        if newer != Self.none { slots[newer].older = older } else { newest = older }
        if older != Self.none { slots[older].newer = newer } else { oldest = newer }
        slots[slot].newer = Self.none
        slots[slot].older = Self.none
    }
}

extension RecencyList: Sendable where Key: Sendable, Value: Sendable {}
extension RecencyList.Slot: Sendable where Key: Sendable, Value: Sendable {}
