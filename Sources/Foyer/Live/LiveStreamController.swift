import FoyerServer
import HTTPTypes
import Hummingbird

/// `GET /streams/{signed name}`: server-sent events carrying `<turbo-stream>` HTML, for
/// `Turbo.connectStreamSource(new EventSource(url))` (Public/live.js does that for `<turbo-stream-source>`).
struct LiveStreamController {
    let streams: LiveStreams
    let metrics: FoyerMetrics
    /// A stream opened with a session ends with it.
    let holds: SessionHolds
    /// A signed-in reader is not sent the changes of people a block keeps them apart from.
    let blocks: Blocks

    func addRoutes(to router: FoyerRouter) {
        router.get("/streams/{name}", use: subscribe)
        router.get("/streams", use: subscribeToSeveral)
    }

    @Sendable func subscribe(request: Request, context: FoyerRequestContext) async throws -> Response {
        let signed = try context.parameters.require("name")
        guard let edition = streams.edition(signedName: signed) else {
            throw AppError(.forbidden, title: "Unknown stream", message: "This stream name was not signed by this server.")
        }
        if edition.stream.requiresSignIn { _ = try context.requireIdentity() }
        // EventSource sends the header when it reconnects by itself; a page restored from Turbo's cache names the
        // last event it applied in the query.
        let reconnected = request.headers.value(.lastEventID)
        let lastEventID = reconnected ?? request.uri.queryParameters["last_event_id"].map(String.init)
        return try await eventStream(following: [(edition, lastEventID)], named: false, reconnected: reconnected != nil, context: context)
    }

    /// `GET /streams?follow={signed name}:{last event id}&follow=…`: several streams on one connection, each event
    /// after `event: {signed name}`. A browser's tabs share one (Public/live.js): HTTP/1.1 gives a browser six
    /// connections to a site, and a connection per tab would take them all. The page that holds it reconnects by
    /// itself, saying where each stream is (`reconnect=1` counts it as a reconnect), so `Last-Event-ID` is not read.
    @Sendable func subscribeToSeveral(request: Request, context: FoyerRequestContext) async throws -> Response {
        let follows = request.uri.queryParameters[values: "follow"]
        guard !follows.isEmpty else {
            throw AppError(.badRequest, title: "No stream named", message: "Name each stream to follow as follow={signed name}:{last event id}.")
        }
        var following: [(edition: LiveStreams.Edition, lastEventID: String?)] = []
        for follow in follows {
            let (signed, lastEventID) = follow.firstIndex(of: ":").map { (follow[..<$0], String(follow[follow.index(after: $0)...])) } ?? (follow, nil)
            guard let edition = streams.edition(signedName: String(signed)) else {
                throw AppError(.forbidden, title: "Unknown stream", message: "This stream name was not signed by this server.")
            }
            // Two languages of one stream may share a connection: tabs opened before and after an account's
            // language changed.
            guard !following.contains(where: { $0.edition == edition }) else {
                throw AppError(.badRequest, title: "Stream named twice", message: "Each stream is followed once per connection.")
            }
            if edition.stream.requiresSignIn { _ = try context.requireIdentity() }
            following.append((edition, lastEventID.flatMap { $0.isEmpty ? nil : $0 }))
        }
        return try await eventStream(following: following, named: true, reconnected: request.uri.queryParameters["reconnect"] == "1", context: context)
    }

    private func eventStream(following: [(edition: LiveStreams.Edition, lastEventID: String?)], named: Bool, reconnected: Bool, context: FoyerRequestContext)
        async throws -> Response
    {
        let (streams, open, holds) = (streams, metrics.openEventStreams, holds)
        let session = context.identity?.session
        let viewer: LiveStreams.Viewer? = if let identity = context.identity {
            .init(userId: identity.userId, keptApart: try await blocks.keptApart(from: identity.userId))
        } else {
            nil
        }
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
                    following, named: named, reconnected: reconnected, heldBy: session.map { session in { end in holds.hold(session, end: end) } },
                    viewer: viewer, open: open, on: connection, to: &writer
                )
            }
        )
    }
}

extension HTTPField.Name {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
    static let xAccelBuffering = HTTPField.Name("X-Accel-Buffering")!
}
