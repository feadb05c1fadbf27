import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// `--graphql-rate-limit`: so many operations per window for each caller.
public struct GraphQLRateLimit: Sendable, Equatable, CustomStringConvertible {
    public let operations: Int
    /// Seconds.
    public let window: Int

    public init(operations: Int, window: Int) {
        self.operations = operations
        self.window = window
    }

    /// 10 a second for a minute on end, 600 at once: more than twenty screens opening together ask for, far less
    /// than one runaway client loop sends.
    public static let standard = GraphQLRateLimit(operations: 600, window: 60)

    static let units: [String: Int] = ["s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600]

    /// `300/min`, `20/s`, `5000/h`; `off` is nil.
    public static func parse(_ text: String) -> Result<GraphQLRateLimit?, Invalid> {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        if trimmed == "off" { return .success(nil) }
        let parts = trimmed.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let operations = Int(parts[0]), operations > 0, let window = units[String(parts[1])] else {
            return .failure(Invalid(text: text))
        }
        return .success(GraphQLRateLimit(operations: operations, window: window))
    }

    public struct Invalid: Error, CustomStringConvertible {
        let text: String
        public var description: String {
            "\"\(text)\" is not a rate limit; write operations per second, minute or hour (300/min, 20/s, 5000/h), or off"
        }
    }

    public var description: String {
        "\(operations)/\(Self.units.first { $0.value == window && $0.key.count == 1 }?.key ?? "\(window)s")"
    }
}

/// Each caller's operations at `/graphql`, as a token bucket: `operations` at once, refilled at `operations` per
/// `window`. Kept in this instance's memory: a check costs a lock, not a database round trip, and behind a load
/// balancer each instance allows a caller its own quota.
final class CallerRateLimit: Sendable {
    let limit: GraphQLRateLimit
    private let metrics: FoyerMetrics
    private let buckets = NIOLockedValueBox(Buckets())
    /// A policy header is the same on every answer.
    let policy: String

    private struct Buckets {
        var tokens: [Int64: (available: Double, at: UInt64)] = [:]
        var takenSincePrune = 0
    }

    /// After this many takes, buckets that are full again are forgotten (a full bucket is a missing one).
    private static let pruneEvery = 4096

    init(_ limit: GraphQLRateLimit, metrics: FoyerMetrics) {
        self.limit = limit
        self.metrics = metrics
        policy = "\"graphql\";q=\(limit.operations);w=\(limit.window)"
    }

    /// What a caller has left after an answer, for the `RateLimit` header.
    struct Quota: Sendable {
        let remaining: Int
        /// Seconds until the bucket is full again.
        let resetsIn: Int
    }

    /// Takes `cost` operations from the caller's quota, or throws the refusal they get (none is taken then).
    @discardableResult
    func take(_ cost: Int = 1, caller: Int64, now: UInt64 = NIODeadline.now().uptimeNanoseconds) throws(GraphQLRefusal) -> Quota {
        let capacity = Double(limit.operations)
        let perNanosecond = capacity / (Double(limit.window) * 1e9)
        let taken: (granted: Bool, left: Double) = buckets.withLockedValue { buckets in
            let previous = buckets.tokens[caller]
            let available = previous.map { min(capacity, $0.available + Double(now &- $0.at) * perNanosecond) } ?? capacity
            buckets.takenSincePrune += 1
            if buckets.takenSincePrune >= Self.pruneEvery {
                buckets.takenSincePrune = 0
                buckets.tokens = buckets.tokens.filter { $0.value.available + Double(now &- $0.value.at) * perNanosecond < capacity }
            }
            guard available >= Double(cost) else {
                buckets.tokens[caller] = (available, now)
                return (false, available)
            }
            buckets.tokens[caller] = (available - Double(cost), now)
            return (true, available - Double(cost))
        }
        let resetsIn = Int(((capacity - taken.left) / perNanosecond / 1e9).rounded(.up))
        guard taken.granted else {
            metrics.graphQLRateLimited.increment()
            let wait = max(1, Int(((Double(cost) - taken.left) / perNanosecond / 1e9).rounded(.up)))
            var refusal = GraphQLRefusal(
                .tooManyRequests,
                "Too many GraphQL operations: this server allows \(limit.operations) per \(Self.describe(window: limit.window)) for each caller. Try again in \(wait) s.",
                code: "RATE_LIMITED"
            )
            refusal.headers[.retryAfter] = String(wait)
            refusal.headers[.rateLimitPolicy] = policy
            refusal.headers[.rateLimit] = Self.header(Quota(remaining: Int(taken.left), resetsIn: resetsIn))
            throw refusal
        }
        return Quota(remaining: Int(taken.left), resetsIn: resetsIn)
    }

    static func header(_ quota: Quota) -> String {
        "\"graphql\";r=\(quota.remaining);t=\(quota.resetsIn)"
    }

    /// Adds the policy and what is left to an answer.
    func label(_ response: inout Response, with quota: Quota) {
        response.headers[.rateLimitPolicy] = policy
        response.headers[.rateLimit] = Self.header(quota)
    }

    private static func describe(window: Int) -> String {
        switch window {
        case 1: "second"
        case 60: "minute"
        case 3600: "hour"
        default: "\(window) seconds"
        }
    }
}

extension HTTPField.Name {
    /// draft-ietf-httpapi-ratelimit-headers: the quota policy, and what is left of it.
    static let rateLimitPolicy = HTTPField.Name("RateLimit-Policy")!
    static let rateLimit = HTTPField.Name("RateLimit")!
}
