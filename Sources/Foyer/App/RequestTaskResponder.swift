import Hummingbird

/// Runs each request's responder (middleware, router, handler) in a child task of its own, so the connection's
/// task never grows deep. Swift keeps an async task's stack slabs until the task ends, at the largest size any
/// call ever needed: a keep-alive connection that once ran the middleware chain held ~35 KB for the rest of its
/// life, which is what a live page's stream (or any idle keep-alive connection) then cost. The child's stack is
/// freed when the response is returned; the body, a live stream included, is written by the shallow connection task.
struct RequestTaskResponder<Wrapped: HTTPResponder & Sendable>: HTTPResponder where Wrapped.Context == FoyerRequestContext {
    typealias Context = FoyerRequestContext

    /// The chain behind one reference. Each request copies the responder: its child task captures it, and
    /// `FoyerApplication`, generic in another module, copies it through value witnesses. Held inline, the chain
    /// (responders, the router's, the error pages' views…) was copied field by field: 6 % of `/up`'s CPU.
    private final class Chain: Sendable {
        let wrapped: Wrapped
        init(_ wrapped: Wrapped) { self.wrapped = wrapped }
    }

    private let chain: Chain

    init(wrapped: Wrapped) {
        chain = Chain(wrapped)
    }

    func respond(to request: Request, context: Context) async throws -> Response {
        let chain = chain
        // A child task by `async let`: a task group's `next()` and its closing wait cost 6 task switches more.
        async let response = chain.wrapped.respond(to: request, context: context)
        return try await response
    }
}
