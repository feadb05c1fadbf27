import ServiceLifecycle

/// Closes what the application opened (an HTTP client, upstream connections) when it stops, after in-flight
/// requests are done.
struct ClosingService: Service {
    let close: @Sendable () async throws -> Void

    func run() async throws {
        try? await gracefulShutdown()
        try await close()
    }
}
