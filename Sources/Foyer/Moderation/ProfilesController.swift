import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// A person as others see them: a name and their posts (`/users/{id}`, `GET /api/v1/users/{id}`), with Report
/// and Block for signed-in readers. Never the address. A suspended account's profile is gone for others, and so is
/// the profile of anyone kept apart from the reader by a block.
struct ProfilesController {
    let users: UserRepository
    let posts: PostRepository
    let views: Views

    static let postsShown = 50

    func addRoutes(to router: FoyerRouter) {
        router.get("/users/{id}", use: page)
        router.get("/api/v1/users/{id}", use: json)
    }

    private func person(_ context: FoyerRequestContext) async throws -> User {
        try await Self.person(try context.parameters.require("id"), visibleTo: context.identity, users: users, blocks: posts.blocks)
    }

    /// The person with the id `raw`, when `caller` may see them: 404 otherwise, for unknown and hidden alike (a
    /// suspended account, but to itself and moderators; anyone kept apart from the caller by a block).
    static func person(_ raw: String, visibleTo caller: Identity?, users: UserRepository, blocks: Blocks) async throws -> User {
        guard let id = Int64(raw), let user = try await users.storage.find(id: id),
            user.suspendedAt == nil || caller?.userId == id || caller?.user.moderates == true,
            try await !blocks.keptApart(from: caller).contains(id)
        else {
            throw AppError(.notFound, title: Phrase("profile.not_found.title"), message: Phrase("profile.not_found.message", ["path": raw]))
        }
        return user
    }

    struct ProfileView: Sendable {
        let id: Int64
        let name: String
        let since: String
        let posts: [PostRowView]
        let hasPosts: Bool
        /// Signed in and not this person: Report and Block.
        let canAct: Bool
    }

    @Sendable func page(request: Request, context: FoyerRequestContext) async throws -> Response {
        let user = try await person(context)
        let id = user.id ?? 0
        let time = views.readerTime(request, context: context)
        let rows = try await posts.storage.posts(by: id, limit: Self.postsShown).enumerated().map { PostRowView($1, time: time, position: $0) }
        let view = ProfileView(
            id: id, name: user.name, since: time.view(of: user.createdAt).relative, posts: rows, hasPosts: !rows.isEmpty,
            canAct: context.identity.map { $0.userId != id } ?? false
        )
        return views.page("users/show", ["title": user.name, "profile": view], request: request, context: context)
    }

    struct ProfileJSON: Encodable {
        let id: Int64
        let name: String
        let url: String
        let posts: [PostsAPIController.PostJSON]
    }

    @Sendable func json(request: Request, context: FoyerRequestContext) async throws -> Response {
        let user = try await person(context)
        let id = user.id ?? 0
        let base = request.baseURL
        let shown = try await posts.storage.posts(by: id, limit: Self.postsShown).map { PostsAPIController.PostJSON($0, baseURL: base) }
        return .json(ProfileJSON(id: id, name: user.name, url: "\(base)/users/\(id)", posts: shown))
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension ProfilesController.ProfileView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "name": self.name
        case "since": since
        case "posts": posts
        case "hasPosts": hasPosts
        case "canAct": canAct
        default: nil
        }
    }
}
