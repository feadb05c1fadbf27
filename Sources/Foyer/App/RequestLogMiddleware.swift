import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Names each request (the client's `X-Request-Id` when it sends a sane one), logs it with its status and time,
/// and echoes the id so a client's report can be matched to our log.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let requestID = Self.acceptableID(request.headers[.xRequestID]) ?? context.id
        context.requestID = requestID
        context.logger[metadataKey: "request_id"] = .string(requestID)
        let start = ContinuousClock.now
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            // ErrorMiddleware sits inside this one, so only a failure of its own can land here.
            context.logger.error("\(request.method) \(request.uri.path) failed: \(error)")
            throw error
        }
        response.headers[.xRequestID] = requestID
        // Tenths of a millisecond, without Foundation's slow String(format:) on every request.
        let tenths = Int(((ContinuousClock.now - start) / .milliseconds(1) * 10).rounded())
        context.logger.info("\(request.method) \(request.uri.path) \(response.status.code) \(tenths / 10).\(tenths % 10)ms")
        return response
    }

    static func acceptableID(_ value: String?) -> String? {
        guard let value, !value.isEmpty, value.count <= 128,
            value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.:".contains($0)) })
        else { return nil }
        return value
    }
}
