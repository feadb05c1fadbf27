import Crypto
import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird

/// `GET /metrics` for Prometheus, in the text exposition format. With `--metrics-token` it asks for that Bearer
/// token (Prometheus' `authorization` scrape setting); without, it is open, as usual on a private scrape network.
struct MetricsController {
    let metrics: FoyerMetrics
    let token: String?

    func addRoutes(to router: FoyerRouter) {
        router.get("/metrics", use: scrape)
    }

    @Sendable func scrape(request: Request, context: FoyerRequestContext) async throws -> Response {
        if let token, !Self.presents(token, request.headers.value(.authorization)) {
            return Response(
                status: .unauthorized,
                headers: [.contentType: "text/plain; charset=utf-8", .wwwAuthenticate: #"Bearer realm="metrics""#],
                body: .init(byteBuffer: ByteBuffer(string: "The metrics need the Bearer token given to --metrics-token\n"))
            )
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: metrics.exposition())
        )
    }

    /// Compared as digests, so the time taken says nothing about how much of the token was right.
    static func presents(_ token: String, _ authorization: String?) -> Bool {
        guard let authorization, let presented = AuthenticationMiddleware.token(fromAuthorization: authorization) else { return false }
        return SHA256.hash(data: Data(presented.utf8)) == SHA256.hash(data: Data(token.utf8))
    }
}
