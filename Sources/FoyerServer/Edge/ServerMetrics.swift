import Prometheus

/// The series the server layer keeps: connections, the HTTP version of each request, the edge's refusals. They go in
/// the application's one registry (`FoyerMetrics.registry`), so `GET /metrics` writes them with every other.
public final class ServerMetrics: Sendable {
    /// The HTTP version a request came over: `http/1.1` (or 1.0), or `h2` (negotiated with ALPN over TLS).
    public enum HTTPVersionName: String, CaseIterable, Sendable {
        case http1 = "http/1.1", h2
    }

    let openConnections: Gauge
    let refusedConnections: Counter
    let h2Connections: Gauge
    private let requestsByVersion: [HTTPVersionName: Counter]
    private let edgeRefusals: [EdgeRefusal: Counter]

    public init(registry: PrometheusCollectorRegistry) {
        func name(_ metric: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "foyer", metricName: metric, unitName: unit, helpText: help)
        }
        let versionRequests = name("http_version_requests", "total", "HTTP requests read, by the protocol they came over: http/1.1 or h2")
        requestsByVersion = Dictionary(uniqueKeysWithValues: HTTPVersionName.allCases.map {
            ($0, registry.makeCounter(descriptor: versionRequests, labels: [("protocol", $0.rawValue)]))
        })
        h2Connections = registry.makeGauge(descriptor: name("http2_connections_open", "", "Open client connections that speak HTTP/2"))
        openConnections = registry.makeGauge(descriptor: name("http_connections_open", "", "Open client connections"))
        refusedConnections = registry.makeCounter(descriptor: name(
            "http_connections_refused", "total", "Client connections closed at once because the connection cap was reached"
        ))
        let edgeRefusal = name("http_edge_refusals", "total", "Requests the edge answered itself and closed: 400, 408, 414, 431")
        // One series per reason: a refusal in JSON and in HTML count together.
        let byReason = Dictionary(Set(EdgeRefusal.all.map(\.metricsReason)).map {
            ($0, registry.makeCounter(descriptor: edgeRefusal, labels: [("reason", $0)]))
        }, uniquingKeysWith: { first, _ in first })
        edgeRefusals = Dictionary(uniqueKeysWithValues: EdgeRefusal.all.map { ($0, byReason[$0.metricsReason]!) })
    }

    /// One request read, before any route sees it.
    func requestRead(over version: HTTPVersionName) { requestsByVersion[version]?.increment() }

    /// A request the edge refused itself.
    func edgeRefused(_ refusal: EdgeRefusal) { edgeRefusals[refusal]?.increment() }
}
