import AsyncHTTPClient
import ServiceLifecycle

/// Shuts an HTTP client down when the application stops, after in-flight requests are done.
struct HTTPClientService: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}
