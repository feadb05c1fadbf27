import GRDB
import HTTPTypes
import Hummingbird

/// For load balancers and orchestrators: 200 when the database answers, 503 when it does not.
struct HealthController {
    let database: any DatabaseWriter

    func addRoutes(to router: Router<FoyerRequestContext>) {
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
