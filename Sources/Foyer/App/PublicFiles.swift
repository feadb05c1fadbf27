import Foundation
import Hummingbird
import Logging

/// Files from `Public/` for paths no route answers. Hummingbird's file middleware answers any path holding `..`
/// with a bare 400, even where `..` is only part of a name (`/configurations/0..0_v1.json`): such a path is no file
/// of ours, so the router's own answer (a 404) stands. A `..` segment (a traversal) still gets the 400.
struct PublicFiles: RouterMiddleware {
    typealias Context = FoyerRequestContext
    let files: FileMiddleware<FoyerRequestContext, LocalFileSystem>

    init(directory: String, logger: Logger) {
        files = FileMiddleware(directory, logger: logger)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // Hummingbird's file middleware serves a file only where no route answered (the router throws a 404), but
        // it is generic and unspecialized here: asked on every request, it cost three task switches each time.
        let noRoute: any Error
        do {
            return try await next(request, context)
        } catch let error as any HTTPResponseError where error.status == .notFound {
            noRoute = error
        }
        let raw = request.uri.path
        // Decoded only when it holds `%` or `..`, as few paths do.
        let bytes = raw.utf8
        if bytes.contains(UInt8(ascii: "%")) || zip(bytes, bytes.dropFirst()).contains(where: { $0 == UInt8(ascii: ".") && $1 == $0 }) {
            let path = raw.removingPercentEncoding ?? raw
            guard !path.contains("..") || path.split(separator: "/").contains("..") else { throw noRoute }
        }
        return try await files.handle(request, context: context) { _, _ in throw noRoute }
    }
}
