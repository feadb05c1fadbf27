import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// Blocking someone: `POST /api/v1/blocks`, `DELETE /api/v1/blocks/{user_id}`, `GET /api/v1/blocks`, the Block
/// buttons on profiles and posts, and `/blocks` to list and lift them. Each block is a notice in the moderation log.
struct BlocksController {
    let blocks: Blocks
    let users: UserRepository
    let moderation: any ModerationStorage
    let views: Views

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.post("/api/v1/blocks", use: createFromAPI)
        signedIn.get("/api/v1/blocks", use: listJSON)
        signedIn.delete("/api/v1/blocks/{user_id}", use: destroyFromAPI)
        signedIn.post("/users/{id}/block", use: createFromForm)
        signedIn.get("/blocks", use: page)
        signedIn.post("/blocks/{user_id}/unblock", use: destroyFromForm)
    }

    struct BlockBody: FormOrJSONBody {
        static let expectedJSON = #"{"user_id": 1}"#
        var userId: Int64?

        init(fields: [String: String]) { userId = fields["user_id"].flatMap { Int64($0) } }

        enum CodingKeys: String, CodingKey { case userId = "user_id" }
    }

    struct BlockJSON: Encodable {
        let user: User.Public
        let createdAt: Date
    }

    @Sendable func createFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let body = try await request.decodeBody(as: BlockBody.self)
        let (blocked, new) = try await block(body.userId, by: context.identity.user)
        return .json(BlockJSON(user: blocked.publicView, createdAt: Date()), status: new ? .created : .ok)
    }

    @Sendable func createFromForm(request: Request, context: SignedInContext) async throws -> Response {
        _ = try await block(Int64(try context.parameters.require("id")), by: context.identity.user)
        return .afterSubmit(request, redirectTo: "/posts", native: .refresh).flashing(.blocked)
    }

    /// The block, written once (and logged for the moderators); true when it is new.
    private func block(_ id: Int64?, by blocker: User) async throws -> (User, Bool) {
        guard let id, let blockerID = blocker.id, id != blockerID, let blocked = try await users.storage.find(id: id) else {
            throw ValidationFailed(errors: ["user_id": [Phrase("blocks.errors.nobody")]])
        }
        guard try await blocks.block(id, by: blockerID) else { return (blocked, false) }
        try await moderation.log(ModerationLogEntry(
            moderatorId: blockerID, moderatorName: blocker.name, action: .blocked, reportId: nil, postId: nil, userId: id,
            about: .account(of: blocked.name), in: views.languages.fallback, note: "", createdAt: Date()
        ))
        return (blocked, true)
    }

    @Sendable func destroyFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        try await unblock(context)
        return Response(status: .noContent)
    }

    @Sendable func destroyFromForm(request: Request, context: SignedInContext) async throws -> Response {
        try await unblock(context)
        return .afterSubmit(request, redirectTo: "/blocks", native: .refresh).flashing(.unblocked)
    }

    private func unblock(_ context: SignedInContext) async throws {
        guard let id = Int64(try context.parameters.require("user_id")) else {
            throw AppError(.notFound, title: Phrase("blocks.errors.no_person.title"), message: Phrase("blocks.errors.no_person"))
        }
        try await blocks.unblock(id, by: context.identity.userId)
    }

    @Sendable func listJSON(request: Request, context: SignedInContext) async throws -> Response {
        .json(try await blocks.storage.blocks(by: context.identity.userId).map { BlockJSON(user: $0.blocked, createdAt: $0.createdAt) })
    }

    /// `moderation/blocks`: the people you blocked, each with Unblock.
    struct BlocksView: Sendable {
        struct Person: Sendable {
            let id: Int64
            let name: String
            let since: TimeView
        }

        let people: [Person]
        let isEmpty: Bool
    }

    @Sendable func page(request: Request, context: SignedInContext) async throws -> Response {
        let time = views.readerTime(request, context: context)
        let people = try await blocks.storage.blocks(by: context.identity.userId).map {
            BlocksView.Person(id: $0.blocked.id, name: $0.blocked.name, since: time.view(of: $0.createdAt))
        }
        return views.page(
            "moderation/blocks", ["title": Phrase("blocks.title"), "blocks": BlocksView(people: people, isEmpty: people.isEmpty)],
            request: request, context: context
        )
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension BlocksController.BlocksView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "people": people
        case "isEmpty": isEmpty
        default: nil
        }
    }
}

extension BlocksController.BlocksView.Person: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "name": self.name
        case "since": since
        default: nil
        }
    }
}
