import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// Hummingbird's router, plus a record of which methods each path takes: its trie answers a known path with an
/// unknown method as a plain 404, and HTTP says that is a `405` naming the methods in `Allow`.
final class FoyerRouter: RouterMethods {
    typealias Context = FoyerRequestContext
    let router: Router<FoyerRequestContext>
    let methods = RouteMethods()

    init(options: RouterOptions) {
        router = Router(context: FoyerRequestContext.self, options: options)
    }

    @discardableResult func on<Responder: HTTPResponder>(
        _ path: RouterPath, method: HTTPRequest.Method, responder: Responder
    ) -> Self where Responder.Context == Context {
        methods.add(path.description, method)
        router.on(path, method: method, responder: responder)
        return self
    }

    @discardableResult func add(middleware: any MiddlewareProtocol<Request, Response, Context>) -> Self {
        router.add(middleware: middleware)
        return self
    }
}

/// Route patterns (`/posts/{id}`) and the methods registered for each.
final class RouteMethods: Sendable {
    private let routes = NIOLockedValueBox([(pattern: [Substring], methods: Set<String>)]())

    func add(_ pattern: String, _ method: HTTPRequest.Method) {
        let components = pattern.split(separator: "/")
        routes.withLockedValue { routes in
            var added = [method.rawValue]
            if method == .get { added.append(HTTPRequest.Method.head.rawValue) }
            if let index = routes.firstIndex(where: { $0.pattern == components }) {
                routes[index].methods.formUnion(added)
            } else {
                routes.append((components, Set(added)))
            }
        }
    }

    /// Every method some route takes at this path, sorted; empty when no route matches it at all. A path that a
    /// route names word for word is that route's, as the router resolves it (`/passkeys/registration_options` is not
    /// `/passkeys/{id}`): only the most literal matches count.
    func allowed(at path: String) -> [String] {
        let components = path.split(separator: "/")
        let methods = routes.withLockedValue { routes in
            let matching = routes.filter { Self.matches($0.pattern, components) }
            let literal = { (pattern: [Substring]) in zip(pattern, components).map { $0 == $1 } }
            guard let best = matching.map({ literal($0.pattern) }).max(by: { $0.lexicographicallyPrecedes($1) { !$0 && $1 } }) else { return Set<String>() }
            return matching.filter { literal($0.pattern) == best }.reduce(into: Set<String>()) { $0.formUnion($1.methods) }
        }
        return methods.sorted()
    }

    private static func matches(_ pattern: [Substring], _ path: [Substring]) -> Bool {
        if pattern.last == "**" { return path.count >= pattern.count - 1 && zip(pattern.dropLast(), path).allSatisfy(componentMatches) }
        return pattern.count == path.count && zip(pattern, path).allSatisfy(componentMatches)
    }

    private static func componentMatches(_ pattern: Substring, _ component: Substring) -> Bool {
        pattern == component || pattern == "*" || (pattern.hasPrefix("{") && pattern.hasSuffix("}"))
            || (pattern.hasPrefix(":") && pattern.count > 1)
    }
}

/// A path some route takes, asked with a method none of them takes: `405` with `Allow`, in the client's format.
struct MethodNotAllowedMiddleware: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let methods: RouteMethods
    let errors: ErrorMiddleware

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound && context.coreContext.endpointPath.value == "NotFound" {
            let allowed = methods.allowed(at: request.uri.path)
            guard !allowed.isEmpty else { throw error }
            let refusal = AppError(
                .methodNotAllowed, title: Phrase("errors.method.title"),
                message: Phrase("errors.method", ["path": request.uri.path, "method": request.method.rawValue, "allowed": allowed.joined(separator: ", ")])
            )
            var response = errors.response(for: refusal, request: request, context: context)
            response.headers[.allow] = allowed.joined(separator: ", ")
            return response
        }
    }
}
