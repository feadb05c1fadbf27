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
        let raw = request.uri.path
        // Most paths hold neither `%` nor `..`: Foundation's percent decoding was 2 % of a proxied GraphQL request.
        let bytes = raw.utf8
        guard bytes.contains(UInt8(ascii: "%")) || zip(bytes, bytes.dropFirst()).contains(where: { $0 == UInt8(ascii: ".") && $1 == $0 }) else {
            return try await files.handle(request, context: context, next: next)
        }
        let path = raw.removingPercentEncoding ?? raw
        guard !path.contains("..") || path.split(separator: "/").contains("..") else { return try await next(request, context) }
        return try await files.handle(request, context: context, next: next)
    }
}
