import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Names each request (the client's `X-Request-Id` when it sends a sane one) and traces it (the caller's
/// `traceparent` continued, or a new trace), logs it with its status and time, and echoes the id so a client's
/// report can be matched to our log. Upstream calls made meanwhile carry both (RequestTrace).
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let trace = RequestTrace(continuing: request.headers, fallbackID: context.id)
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
            throw error
        }
        response.headers[.xRequestID] = requestID
        // Tenths of a millisecond, without Foundation's slow String(format:) on every request.
        let tenths = Int(((ContinuousClock.now - start) / .milliseconds(1) * 10).rounded())
        context.logger.info(
            "\(request.method) \(request.uri.path) \(response.status.code) \(tenths / 10).\(tenths % 10)ms", metadata: trace.logMetadata
        )
        return response
    }
}
