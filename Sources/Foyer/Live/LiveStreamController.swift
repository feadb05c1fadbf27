import HTTPTypes
import Hummingbird

/// `GET /streams/{signed name}`: server-sent events carrying `<turbo-stream>` HTML, for
/// `Turbo.connectStreamSource(new EventSource(url))` (Public/live.js does that for `<turbo-stream-source>`).
struct LiveStreamController {
    let streams: LiveStreams
    let metrics: FoyerMetrics
    /// A stream opened with a session ends with it.
    let holds: SessionHolds

    func addRoutes(to router: FoyerRouter) {
        router.get("/streams/{name}", use: subscribe)
    }

    @Sendable func subscribe(request: Request, context: FoyerRequestContext) async throws -> Response {
        let signed = try context.parameters.require("name")
        guard let stream = streams.stream(signedName: signed) else {
            throw AppError(.forbidden, title: "Unknown stream", message: "This stream name was not signed by this server.")
        }
        if stream.requiresSignIn { _ = try context.requireIdentity() }
        // EventSource sends the header when it reconnects by itself; a page restored from Turbo's cache names the
        // last event it applied in the query.
        let reconnected = request.headers[.lastEventID]
        let lastEventID = reconnected ?? request.uri.queryParameters["last_event_id"].map(String.init)
        let (streams, open, holds) = (streams, metrics.openEventStreams, holds)
        let session = context.identity?.session
        // Events go straight to the connection; the router test client's channel is a stand-in that drops them.
        let connection = context.channel
        return Response(
            status: .ok,
            headers: [
                .contentType: "text/event-stream; charset=utf-8", .cacheControl: "no-cache",
                // nginx would otherwise hold events back to fill its buffer.
                .xAccelBuffering: "no",
            ],
            body: ResponseBody { writer in
                try await streams.serve(
                    stream, lastEventID: lastEventID, reconnected: reconnected != nil, heldBy: session.map { session in { end in holds.hold(session, end: end) } },
                    open: open, on: connection, to: &writer
                )
            }
        )
    }
}

extension HTTPField.Name {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
    static let xAccelBuffering = HTTPField.Name("X-Accel-Buffering")!
}
