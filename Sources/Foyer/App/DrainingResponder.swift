import FoyerServer
import Hummingbird

/// While draining, every response says `Connection: close`: clients and balancers open a new connection for their
/// next request (to another instance), rather than send it on one this instance is about to close.
struct DrainingResponder<Wrapped: HTTPResponder>: HTTPResponder {
    let wrapped: Wrapped
    let drain: Drain

    func respond(to request: Request, context: Wrapped.Context) async throws -> Response {
        var response = try await wrapped.respond(to: request, context: context)
        if drain.isDraining, response.status != .switchingProtocols { response.headers[.connection] = "close" }
        return response
    }
}
