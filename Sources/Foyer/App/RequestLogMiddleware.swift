import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Names each request (the client's `X-Request-Id` when it sends a sane one) and traces it (the caller's
/// `traceparent` continued, or a new trace), logs it with its status and time, and echoes the id so a client's
/// report can be matched to our log. Upstream calls made meanwhile carry both (RequestTrace). Counts and times it
/// for `/metrics` by route pattern.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let metrics: FoyerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        // Lines name the request by `request_id` (RequestTrace), not by Hummingbird's id in the logger's metadata,
        // which nothing sets: two changes to that dictionary per request were 2 % of a proxied one.
        let trace = RequestTrace(continuing: request.headers, fallbackID: RequestTrace.newRequestID())
        let requestID = trace.requestID
        context.requestID = requestID
        let start = ContinuousClock.now
        var response: Response
        do {
            response = try await RequestTrace.$current.withValue(trace) {
                try await next(request, context)
            }
        } catch {
            // ErrorMiddleware sits inside this one, so only a failure of its own can land here.
            context.logger.error("\(request.method) \(request.uri.path) failed: \(error)", metadata: trace.logMetadata)
            metrics.recordRequest(
                route: Self.route(of: request, context), method: request.method, status: .internalServerError,
                duration: .now - start
            )
            throw error
        }
        response.headers[.xRequestID] = requestID
        let duration = ContinuousClock.now - start
        metrics.recordRequest(
            route: Self.route(of: request, context), method: request.method, status: response.status, duration: duration
        )
        context.logger.info(Logger.Message(stringLiteral: Self.line(request, response.status, duration)), metadata: trace.logMetadata)
        return response
    }

    /// `GET /up 200 0.1ms`: written into one string made the right size (interpolated, it grew three times), in
    /// tenths of a millisecond without Foundation's slow `String(format:)`.
    static func line(_ request: Request, _ status: HTTPResponse.Status, _ duration: Duration) -> String {
        let tenths = Int((duration / .milliseconds(1) * 10).rounded())
        let path = request.uri.path
        var line = ""
        line.reserveCapacity(request.method.rawValue.utf8.count + path.utf8.count + 24)
        line += request.method.rawValue
        line += " "
        line += path
        line += " "
        line += String(status.code)
        line += " "
        line += String(tenths / 10)
        line += "."
        line += String(tenths % 10)
        line += "ms"
        return line
    }

    /// The pattern of the route that answered, e.g. `/posts/{id}`. Requests no route took are files from
    /// Public/, pages of the Keycloak proxy, or not found: a bounded set of labels whatever the paths asked.
    static func route(of request: Request, _ context: Context) -> String {
        // Hummingbird names its own file middleware so.
        if let pattern = context.endpointPath { return pattern == "FileMiddleware" ? "(public file)" : pattern }
        let path = request.uri.path
        if path.hasPrefix("/realms/") || path.hasPrefix("/auth/realms/") { return "(keycloak proxy)" }
        return "(no route)"
    }
}
