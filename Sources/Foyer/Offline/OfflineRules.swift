import Foundation
import FoyerServer

/// Which paths the service worker keeps for offline use, and how: the `offline` property of the path configuration's
/// rules, so native shells (which ignore it) and the worker read one declaration. As for native shells, rules are
/// tried in order and the last one that matches and names `offline` wins; a path no rule names is not kept.
/// `offline_writes: "queue"` lets a form posted to the path wait in the browser while the network is away.
/// Two settings bound what is kept: `offline_max_entries` pages per person, each at most `offline_max_age` seconds
/// old (flat numbers: turbo-android v1 reads settings as a map of strings, and a nested object would fail its parse).
struct OfflineRules: Sendable {
    enum Strategy: String, CaseIterable, Sendable {
        case networkFirst = "network-first", cacheFirst = "cache-first", staleWhileRevalidate = "stale-while-revalidate", none
    }

    struct Rule: Sendable {
        let patterns: [String]
        let strategy: Strategy?
        let queuesWrites: Bool
    }

    let rules: [Rule]
    let maxEntries: Int
    let maxAge: Int

    static let standardMaxEntries = 100
    static let standardMaxAge = 7 * 24 * 3600
    /// Never kept, whatever a rule says: what changes by the second or is not a page.
    static let neverKept = ["/graphql", "/streams/tasks", "/service-worker.js"]

    init(rules: [[String: Any]], settings: [String: Any], problem: (String) -> StartupError) throws {
        self.rules = try rules.enumerated().compactMap { index, rule in
            let properties = rule["properties"] as? [String: Any] ?? [:]
            let at = "rules[\(index)].properties"
            var strategy: Strategy?
            if let value = properties["offline"] {
                guard let name = value as? String, let named = Strategy(rawValue: name) else {
                    throw problem("\(at).offline must be one of \(Strategy.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                strategy = named
            }
            var queuesWrites = false
            if let value = properties["offline_writes"] {
                guard value as? String == "queue" else { throw problem("\(at).offline_writes can only be \"queue\"") }
                queuesWrites = true
            }
            guard strategy != nil || queuesWrites else { return nil }
            return Rule(patterns: rule["patterns"] as? [String] ?? [], strategy: strategy, queuesWrites: queuesWrites)
        }
        maxEntries = try Self.positive(settings["offline_max_entries"], default: Self.standardMaxEntries, at: "settings.offline_max_entries", problem)
        maxAge = try Self.positive(settings["offline_max_age"], default: Self.standardMaxAge, at: "settings.offline_max_age", problem)
        for path in Self.neverKept {
            if let strategy = strategy(for: path), strategy != .none {
                throw problem("a rule keeps \(path) offline (\(strategy.rawValue)); streams, /graphql and the worker are never kept: add a rule with \"offline\": \"none\" after it")
            }
        }
    }

    /// The strategy for a path (with its query), as the worker decides it.
    func strategy(for path: String) -> Strategy? {
        rules.last { $0.strategy != nil && Self.matches($0.patterns, path) }?.strategy
    }

    func queuesWrites(to path: String) -> Bool {
        rules.contains { $0.queuesWrites && Self.matches($0.patterns, path) }
    }

    private static func matches(_ patterns: [String], _ path: String) -> Bool {
        patterns.contains { pattern in
            (try? NSRegularExpression(pattern: pattern))?.firstMatch(in: path, range: NSRange(path.startIndex..., in: path)) != nil
        }
    }

    private static func positive(_ value: Any?, default standard: Int, at: String, _ problem: (String) -> StartupError) throws -> Int {
        guard let value else { return standard }
        guard let number = value as? Int, number > 0 else { throw problem("\(at) must be a positive whole number") }
        return number
    }

    /// What the worker reads: the rules in order, and the bounds.
    var workerSettings: [String: Any] {
        [
            "rules": rules.map { rule in
                var entry: [String: Any] = ["patterns": rule.patterns]
                if let strategy = rule.strategy { entry["offline"] = strategy.rawValue }
                if rule.queuesWrites { entry["writes"] = "queue" }
                return entry
            },
            "maxEntries": maxEntries, "maxAge": maxAge,
        ]
    }
}
