import GRDB
import HTTPTypes
import Hummingbird

/// For load balancers and orchestrators. `/up`: the process answers (liveness, no I/O);
/// `/healthz`: 200 when the database answers, 503 when it does not (readiness).
struct HealthController {
    let database: any DatabaseWriter

    func addRoutes(to router: FoyerRouter) {
        router.get("/up") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: "OK")))
        }
        router.get("/healthz") { _, context -> Response in
            do {
                _ = try await database.read { try Int.fetchOne($0, sql: "SELECT 1") }
                return Response.json(["status": "ok", "database": "ok"], status: .ok)
            } catch {
                context.logger.error("health check: database failed: \(error)")
                return Response.json(["status": "unavailable", "database": "\(error)"], status: .serviceUnavailable)
            }
        }
    }
}
