import Hummingbird
import NIOConcurrencyHelpers
import FoyerServer
import Prometheus

/// Foyer's metrics, in one Prometheus registry that `GET /metrics` writes out. Every series with a fixed set of
/// labels exists from the start at zero, so a dashboard's `rate()` sees the first failure too.
/// (The command line also points swift-metrics at this registry, so any library that reports through
/// swift-metrics lands in the same scrape.)
public final class FoyerMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    /// The server layer's series, in the same registry.
    public let server: ServerMetrics

    enum SignInOutcome: String, CaseIterable {
        case success, wrongPassword = "wrong_password", throttled, refused
    }

    enum ProviderCall: String, CaseIterable {
        case discovery, token, refresh, clientCredentials = "client_credentials", jwks, userinfo, logout, introspection
    }

    enum UpstreamFailure: String, CaseIterable {
        case unreachable, timeout, sessionExpired = "session_expired", invalidReply = "invalid_reply"
    }

    enum GraphQLRefusalReason: String, CaseIterable {
        case untrusted, introspection, tooComplex = "too_complex", hashMismatch = "hash_mismatch"
    }

    enum PersistedQueryOutcome: String, CaseIterable {
        case hit, miss, registered
    }

    enum GraphQLCacheOutcome: String, CaseIterable {
        case hit, miss, invalidated, evicted
        /// Not kept: the store was full of answers asked for as often at least.
        case notAdmitted = "not_admitted"
    }

    /// `written`: to the mail folder, with no SMTP server configured.
    enum MailOutcome: String, CaseIterable {
        case sent, written, retried, rejected, gaveUp = "gave_up"
    }

    private struct RouteKey: Hashable {
        let route: String
        let method: String
        let statusClass: String
    }

    private static let requestBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(10),
    ]

    /// Made once rather than formatted on every request.
    private static let statusClasses = ["1xx", "2xx", "3xx", "4xx", "5xx"]

    private let requests = NIOLockedValueBox<[RouteKey: (count: Counter, duration: DurationHistogram)]>([:])
    private let signIns: [SignInOutcome: Counter]
    private let keycloakCalls: [ProviderCall: (duration: DurationHistogram, failures: Counter)]
    private let upstreamFailures: [UpstreamFailure: Counter]
    let graphQLUpstreamDuration: DurationHistogram
    let offlineAnswers: Counter
    let openWebSockets: Gauge
    let activeSubscriptions: Gauge
    let openEventStreams: Gauge
    let laggingWebSockets: Counter
    private let graphQLRefusals: [GraphQLRefusalReason: Counter]
    private let persistedQueries: [PersistedQueryOutcome: Counter]
    private let graphQLCacheOutcomes: [GraphQLCacheOutcome: Counter]
    private let mails: [MailOutcome: Counter]
    private let liveResumptions: [LiveStreams.Resumed: Counter]
    let graphQLDeduplicated: Counter
    let graphQLRateLimited: Counter
    /// From the store, every few seconds: the same on every instance.
    let moderationOpenReports: Gauge
    let moderationOldestOpenReportAge: Gauge
    private let moderationActions: [ModerationAction: Counter]
    private let writeConflicts: [WriteConflictOutcome: Counter]

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        server = ServerMetrics(registry: registry)
        func name(_ metric: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "foyer", metricName: metric, unitName: unit, helpText: help)
        }
        let signIn = name("sign_ins", "total", "Sign-in attempts by outcome (refused: the realm that checks passwords did not answer)")
        signIns = Dictionary(uniqueKeysWithValues: SignInOutcome.allCases.map {
            ($0, registry.makeCounter(descriptor: signIn, labels: [("outcome", $0.rawValue)]))
        })
        let keycloakDuration = name("keycloak_request_duration", "seconds", "Calls Foyer makes to Keycloak and other OpenID Connect providers, by call")
        let keycloakFailure = name("keycloak_failures", "total", "Provider calls that got no usable answer, by call")
        keycloakCalls = Dictionary(uniqueKeysWithValues: ProviderCall.allCases.map {
            ($0, (
                registry.makeDurationHistogram(descriptor: keycloakDuration, labels: [("call", $0.rawValue)], buckets: Self.requestBuckets),
                registry.makeCounter(descriptor: keycloakFailure, labels: [("call", $0.rawValue)])
            ))
        })
        let failure = name("graphql_upstream_failures", "total", "GraphQL upstream calls that failed, by kind")
        upstreamFailures = Dictionary(uniqueKeysWithValues: UpstreamFailure.allCases.map {
            ($0, registry.makeCounter(descriptor: failure, labels: [("kind", $0.rawValue)]))
        })
        graphQLUpstreamDuration = registry.makeDurationHistogram(
            descriptor: name("graphql_upstream_request_duration", "seconds", "GraphQL calls to the upstream over HTTP, answered or not"),
            buckets: Self.requestBuckets
        )
        let mail = name("mail", "total", "Mail from the outbox by outcome (retried: the SMTP server was away or said 4xx; gave_up: after 24 hours)")
        mails = Dictionary(uniqueKeysWithValues: MailOutcome.allCases.map {
            ($0, registry.makeCounter(descriptor: mail, labels: [("outcome", $0.rawValue)]))
        })
        let resumed = name(
            "live_resumed", "total",
            "Event streams that reconnected by themselves (Last-Event-ID): replayed what they missed, or reloaded their live frame"
        )
        liveResumptions = Dictionary(uniqueKeysWithValues: LiveStreams.Resumed.allCases.map {
            ($0, registry.makeCounter(descriptor: resumed, labels: [("outcome", $0.rawValue)]))
        })
        offlineAnswers = registry.makeCounter(descriptor: name(
            "tasks_offline_answers", "total", "Task pages served from the offline copy because the upstream could not answer"
        ))
        moderationOpenReports = registry.makeGauge(descriptor: name("moderation_open_reports", "", "Reports no moderator has acted on yet"))
        moderationOldestOpenReportAge = registry.makeGauge(descriptor: name(
            "moderation_oldest_open_report_age", "seconds", "How long the oldest open report has waited (0 with none): alert well before 24 hours"
        ))
        let moderationAction = name("moderation_actions", "total", "Actions moderators took, by action")
        moderationActions = Dictionary(uniqueKeysWithValues: ModerationAction.allCases.map {
            ($0, registry.makeCounter(descriptor: moderationAction, labels: [("action", $0.rawValue)]))
        })
        let writeConflict = name("write_conflicts", "total", "Writes to posts by how their version precondition went (refused: stale, nothing written)")
        writeConflicts = Dictionary(uniqueKeysWithValues: WriteConflictOutcome.allCases.map {
            ($0, registry.makeCounter(descriptor: writeConflict, labels: [("resource", "post"), ("outcome", $0.rawValue)]))
        })
        openWebSockets = registry.makeGauge(descriptor: name("websockets_open", "", "Open GraphQL websockets"))
        activeSubscriptions = registry.makeGauge(descriptor: name("graphql_subscriptions_active", "", "GraphQL subscriptions running for clients"))
        openEventStreams = registry.makeGauge(descriptor: name("live_event_streams_open", "", "Open live page event streams (text/event-stream)"))
        laggingWebSockets = registry.makeCounter(descriptor: name(
            "websockets_closed_lagging", "total", "GraphQL websockets closed (1013) because their client fell too far behind"
        ))
        let graphQLRefusal = name(
            "graphql_refusals", "total",
            "GraphQL operations refused before running: untrusted (not in the trusted documents), introspection (turned off), too_complex, hash_mismatch"
        )
        graphQLRefusals = Dictionary(uniqueKeysWithValues: GraphQLRefusalReason.allCases.map {
            ($0, registry.makeCounter(descriptor: graphQLRefusal, labels: [("reason", $0.rawValue)]))
        })
        let persistedQuery = name(
            "graphql_persisted_queries", "total", "Automatic persisted queries: hit (the hash was known), miss (asked for the query), registered"
        )
        persistedQueries = Dictionary(uniqueKeysWithValues: PersistedQueryOutcome.allCases.map {
            ($0, registry.makeCounter(descriptor: persistedQuery, labels: [("outcome", $0.rawValue)]))
        })
        let cache = name(
            "graphql_cache", "total",
            "Query answers: hit (served from the cache), miss (asked upstream or joined a call in flight), invalidated (dropped because tasks or a mutation may have changed them)"
        )
        graphQLCacheOutcomes = Dictionary(uniqueKeysWithValues: GraphQLCacheOutcome.allCases.map {
            ($0, registry.makeCounter(descriptor: cache, labels: [("result", $0.rawValue)]))
        })
        graphQLDeduplicated = registry.makeCounter(descriptor: name(
            "graphql_deduplicated", "total", "Queries answered by an identical call already in flight instead of one of their own"
        ))
        graphQLRateLimited = registry.makeCounter(descriptor: name(
            "graphql_rate_limited", "total", "GraphQL requests and websocket operations refused (429, RATE_LIMITED) because their caller was over --graphql-rate-limit"
        ))
    }

    func graphQLRefusal(_ reason: GraphQLRefusalReason) { graphQLRefusals[reason]?.increment() }

    func graphQLCache(_ outcome: GraphQLCacheOutcome, by count: Int = 1) { graphQLCacheOutcomes[outcome]?.increment(by: Int64(count)) }

    func persistedQuery(_ outcome: PersistedQueryOutcome) { persistedQueries[outcome]?.increment() }

    /// One answered HTTP request. `route` is the route's pattern, never the raw path, so the series stay few.
    func recordRequest(route: String, method: HTTPRequest.Method, status: HTTPResponse.Status, duration: Duration) {
        let hundreds = status.code / 100
        let statusClass = (1...5).contains(hundreds) ? Self.statusClasses[hundreds - 1] : "\(hundreds)xx"
        let key = RouteKey(route: route, method: method.rawValue, statusClass: statusClass)
        let handles = requests.withLockedValue { requests in
            if let known = requests[key] { return known }
            let labels = [("route", key.route), ("method", key.method), ("status", key.statusClass)]
            let made = (
                registry.makeCounter(descriptor: .init(
                    namespace: "foyer", metricName: "http_requests", unitName: "total",
                    helpText: "HTTP requests answered, by route pattern, method and status class"
                ), labels: labels),
                registry.makeDurationHistogram(descriptor: .init(
                    namespace: "foyer", metricName: "http_request_duration", unitName: "seconds",
                    helpText: "Time to answer HTTP requests (to the response head; streams excluded), by route pattern, method and status class"
                ), labels: labels, buckets: Self.requestBuckets)
            )
            requests[key] = made
            return made
        }
        handles.count.increment()
        handles.duration.record(duration)
    }

    func signIn(_ outcome: SignInOutcome) { signIns[outcome]?.increment() }

    func mail(_ outcome: MailOutcome) { mails[outcome]?.increment() }
    func moderation(_ action: ModerationAction) { moderationActions[action]?.increment() }
    func writeConflict(_ outcome: WriteConflictOutcome) { writeConflicts[outcome]?.increment() }
    func liveResumed(_ outcome: LiveStreams.Resumed) { liveResumptions[outcome]?.increment() }

    func upstreamFailure(_ kind: UpstreamFailure) { upstreamFailures[kind]?.increment() }

    /// One call to Keycloak; `failed` when it got no answer or a 5xx.
    func keycloakCall(_ call: ProviderCall, duration: Duration, failed: Bool) {
        guard let handles = keycloakCalls[call] else { return }
        handles.duration.record(duration)
        if failed { handles.failures.increment() }
    }

    /// The text exposition format, version 0.0.4.
    func exposition() -> ByteBuffer {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16 << 10)
        registry.emit(into: &bytes)
        return ByteBuffer(bytes: bytes)
    }
}
