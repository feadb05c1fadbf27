/// About how often each key was asked for lately, in a fixed 64 KiB whatever the number of keys (a count-min
/// sketch: four small counters per key, its estimate the least of them, never below the truth). Every counter is
/// halved once as many requests have been counted as ten full stores hold, so what was popular long ago fades.
/// TinyLFU's admission: the kept-answer store lets a new answer in over its least recently used one only when the
/// new one has been asked for more often.
struct FrequencySketch {
    private static let counterLimit: UInt8 = 15
    /// Each row's multiplier: multiplying by a different odd number and keeping the top bits is a different hash.
    private static let multipliers: [UInt64] = [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0xBF58_476D_1CE4_E5B9]
    private var counters: [UInt8]
    /// 64 less the bits of an index.
    private let shift: UInt64
    private let halvingPeriod: Int
    private var counted = 0

    /// `expectedKeys`: about how many keys are worth telling apart (the store's entries).
    init(expectedKeys: Int) {
        // Four counters per key at least, a power of two so an index is a mask; 64 KiB for 10,000 entries.
        var bits: UInt64 = 6
        while 1 << bits < expectedKeys * 4 { bits += 1 }
        counters = [UInt8](repeating: 0, count: 1 << bits)
        shift = 64 - bits
        halvingPeriod = max(expectedKeys, 1) * 10
    }

    /// Counts one more request for `key`: only the counters at the key's current estimate go up (conservative
    /// update), so keys that share a counter inflate each other less.
    mutating func increment(_ key: UInt64) {
        let least = estimate(key)
        guard least < Self.counterLimit else { return }
        for row in 0..<4 {
            let at = index(key, row)
            if counters[at] == least { counters[at] = least + 1 }
        }
        counted += 1
        if counted >= halvingPeriod { halve() }
    }

    func estimate(_ key: UInt64) -> UInt8 {
        var least = Self.counterLimit
        for row in 0..<4 { least = min(least, counters[index(key, row)]) }
        return least
    }

    private mutating func halve() {
        counted /= 2
        for at in counters.indices { counters[at] >>= 1 }
    }

    private func index(_ key: UInt64, _ row: Int) -> Int {
        Int(truncatingIfNeeded: (key &* Self.multipliers[row]) >> shift)
    }
}
