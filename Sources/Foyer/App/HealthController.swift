import FoyerServer
import GRDB
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// For load balancers and orchestrators. `/up`: the process answers (liveness, no I/O);
/// `/healthz`: 200 when the database answers and start-up work is done, 503 when not (readiness) and from a SIGTERM on
/// (draining).
struct HealthController {
    let store: Store
    let readiness: Readiness
    let drain: Drain

    func addRoutes(to router: FoyerRouter) {
        router.get("/up") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: "OK")))
        }
        router.get("/healthz") { _, context -> Response in
            // A balancer stops sending requests here, while the ones that still come are served.
            guard !drain.isDraining else {
                return Response.json(["status": "draining", "database": "ok"], status: .serviceUnavailable)
            }
            guard readiness.isReady else {
                return Response.json(["status": "starting", "database": "ok"], status: .serviceUnavailable)
            }
            do {
                try await store.ping()
                return Response.json(["status": "ok", "database": "ok"], status: .ok)
            } catch {
                context.logger.error("health check: database failed: \(error)")
                return Response.json(["status": "unavailable", "database": "\(error)"], status: .serviceUnavailable)
            }
        }
    }
}

/// Whether start-up work that runs after the server listens (the demo account's password hash, a quarter of a
/// second of bcrypt) is done. `/up` answers meanwhile; `/healthz` says "starting".
final class Readiness: Sendable {
    private let ready: NIOLockedValueBox<Bool>

    init(ready: Bool = true) { self.ready = NIOLockedValueBox(ready) }

    var isReady: Bool { ready.withLockedValue { $0 } }
    func markReady() { ready.withLockedValue { $0 = true } }
}
