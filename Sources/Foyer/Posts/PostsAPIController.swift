import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird

/// The posts JSON API for native screens and curl: `/api/v1/posts` and the Rails-style `/posts.json` twins.
struct PostsAPIController {
    /// What a JSON body looks like, for the 400 that refuses another.
    static let expectedJSON = #"{"title": "…", "content": "…"}"#
    let posts: PostRepository
    /// What a post passes before it is published.
    let rules: PostingRules
    let metrics: FoyerMetrics
    /// A write naming no version (no `If-Match`, no `version`) is refused with 428 instead of applied.
    var requirePreconditions = false
    /// Encoded pages until the next write to posts. URLs in them name the host asked, so it is part of the key, and
    /// so are the people a block keeps the reader apart from (empty for most readers, who share one page).
    let encodedPages = GenerationCache<PageKey, EncodedPage>(capacity: 512)
    /// Encoded posts the same way: a native screen opens the same posts again and again, and a database read and
    /// Foundation's JSONEncoder were a point read's largest costs beyond any other route's (perf, scripts/bench).
    /// Each with its author, so a reader kept apart from them by a block is not served it.
    let encodedPosts = GenerationCache<PostKey, EncodedPost>(capacity: 4096)

    struct EncodedPost: Sendable {
        let body: ByteBuffer
        let authorId: Int64
        let version: Int
    }

    struct PostKey: Hashable, Sendable {
        let id: String
        let base: String
    }

    struct PageKey: Hashable, Sendable {
        let paging: Paging
        let keptApart: Set<Int64>
        let base: String
        let path: String
    }

    struct EncodedPage: Sendable {
        let body: ByteBuffer
        let link: String
        let total: Int
    }

    func addRoutes(to router: FoyerRouter) {
        let signedIn = router.group(context: SignedInContext.self)
        for collection in ["/api/v1/posts", "/posts.json"] {
            router.get(RouterPath(collection), use: index)
            signedIn.post(RouterPath(collection), use: create)
        }
        for member in ["/api/v1/posts/{id}", "/posts/{id}.json"] {
            router.get(RouterPath(member), use: show)
            signedIn.patch(RouterPath(member), use: update)
            signedIn.put(RouterPath(member), use: update)
            signedIn.delete(RouterPath(member), use: destroy)
        }
    }

    struct PostJSON: SnakeCaseKeyed {
        let id: Int64
        let title: String
        let content: String
        let createdAt: Date
        let updatedAt: Date
        /// Raised by each change its author makes; send it back (`If-Match: "<version>"`, or `version` in the body)
        /// so that a write made from this read never overwrites a newer one.
        let version: Int
        /// The post's page: what a native list opens in its WebView.
        let url: String
        let author: User.Public
        /// `null` when the post has none: always present, so clients need not tell absent from empty.
        let picture: PictureJSON?
        /// A write's answer only: true when it was made from an older version and merged with what came since.
        var merged: Bool? = nil

        init(_ published: PublishedPost, baseURL: String) {
            id = published.id
            title = published.post.title
            content = published.post.content
            createdAt = published.post.createdAt
            updatedAt = published.post.updatedAt
            version = published.post.version
            url = "\(baseURL)/posts/\(published.id)"
            author = published.author
            picture = published.picture.map { PictureJSON($0, baseURL: baseURL) }
        }

        enum CodingKeys: String, CodingKey {
            case id, title, content, version, url, author, picture, merged, createdAt = "created_at", updatedAt = "updated_at"
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(title, forKey: .title)
            try container.encode(content, forKey: .content)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(updatedAt, forKey: .updatedAt)
            try container.encode(version, forKey: .version)
            try container.encode(url, forKey: .url)
            try container.encode(author, forKey: .author)
            try container.encode(picture, forKey: .picture)
            try container.encodeIfPresent(merged, forKey: .merged)
        }
    }

    /// A post's picture: the page-size variant (`url`, its pixels), the list thumbnail, and the alt text.
    struct PictureJSON: Codable, Sendable {
        let url: String
        let width: Int
        let height: Int
        let thumbnailURL: String
        let alt: String

        init(_ picture: Picture, baseURL: String) {
            url = baseURL + picture.path(.page)
            (width, height) = (picture.width, picture.height)
            thumbnailURL = baseURL + picture.path(.thumbnail)
            alt = picture.alt
        }

        enum CodingKeys: String, CodingKey {
            case url, width, height, alt, thumbnailURL = "thumbnail_url"
        }
    }

    @Sendable func index(request: Request, context: FoyerRequestContext) async throws -> Response {
        let key = PageKey(
            paging: try Paging(request), keptApart: try await posts.blocks.keptApart(from: context.identity), base: request.baseURL,
            path: request.uri.path
        )
        let encoded = try await encodedPages.value(for: key, generation: posts.generation.current) {
            let page = try await posts.page(key.paging, excluding: key.keptApart)
            return EncodedPage(
                body: Response.encodeJSON(page.posts.map { PostJSON($0, baseURL: key.base) }),
                link: Self.linkHeader(page, base: key.base + key.path),
                total: page.total
            )
        }
        var response = Response.json(encoded: encoded.body)
        response.headers[.link] = encoded.link
        response.headers[.xTotalCount] = String(encoded.total)
        return response
    }

    @Sendable func show(request: Request, context: FoyerRequestContext) async throws -> Response {
        let key = PostKey(id: try context.parameters.require("id"), base: request.baseURL)
        // Read before the post is: a write meanwhile leaves the entry stale at once. Unknown ids are not kept (404);
        // nor is a post only its author and moderators see, which each of them reads afresh.
        let generation = posts.generation.current
        if let encoded = encodedPosts.cached(key, generation: generation),
            try await !posts.blocks.keptApart(from: context.identity).contains(encoded.authorId)
        {
            return Self.answer(encoded.body, version: encoded.version, to: request)
        }
        let published = try await posts.find(in: context)
        let encoded = Response.encodeJSON(PostJSON(published, baseURL: key.base))
        if published.isVisible(to: nil) {
            encodedPosts.keep(
                EncodedPost(body: encoded, authorId: published.post.authorId, version: published.post.version), for: key, generation: generation
            )
        }
        return Self.answer(encoded, version: published.post.version, to: request)
    }

    /// A post's JSON with its `ETag`, or `304` when the client's copy (`If-None-Match`) is this version.
    private static func answer(_ body: ByteBuffer, version: Int, to request: Request) -> Response {
        let etag = PostPrecondition.etag(version)
        if let ifNoneMatch = request.headers.value(.ifNoneMatch), PathConfigurationController.matches(PostPrecondition.entityTags(ifNoneMatch), etag: etag) {
            return Response(status: .notModified, headers: [.eTag: etag])
        }
        var response = Response.json(encoded: body)
        response.headers[.eTag] = etag
        return response
    }

    @Sendable func create(request: Request, context: SignedInContext) async throws -> Response {
        try rules.terms.requireAccepted(by: context.identity)
        let changes = try await Self.changes(from: request)
        let created = try await rules.create(changes, by: context.identity, in: posts).post
        var response = Response.json(PostJSON(created, baseURL: request.baseURL), status: .created)
        response.headers[.location] = "\(request.baseURL)/api/v1/posts/\(created.id)"
        response.headers[.eTag] = PostPrecondition.etag(created.post.version)
        return response
    }

    /// `PUT`/`PATCH`: applied only over the version the client names (`If-Match`, or `version` in the body); a
    /// newer one is `412` (or `409`) with the post as it is now. Naming none applies it over whatever is there, as
    /// `curl` users expect, unless `--require-preconditions` (`428`).
    @Sendable func update(request: Request, context: SignedInContext) async throws -> Response {
        var published = try await posts.findOwn(in: context)
        try rules.terms.requireAccepted(by: context.identity)
        let changes = try await Self.changes(from: request)
        // What is invalid is 422 whatever version it names: a precondition judges only a write that could land.
        try changes.validate(creating: false)
        let precondition = try required(PostPrecondition(request, bodyVersion: changes.baseVersion))
        // Another write between this read and the write: a precondition is judged again on what it left; a write
        // naming none goes over it (a few times at most: each retry follows someone else's write).
        for _ in 0..<5 {
            var write = changes
            var merged = false
            if !precondition.holds(at: published.post.version) {
                // Made from an older version: applied when it changed only fields nobody changed since.
                switch try await posts.merge(changes, from: precondition, into: published) {
                case .merged(let fields)?: (write, merged) = (PostMerge.restricted(changes, to: fields), true)
                case .conflict(let both)?: return conflict(published, changes: changes, precondition, request, fields: both)
                case nil: return conflict(published, changes: changes, precondition, request)
                }
            }
            do {
                let updated = try await rules.update(published, with: write, by: context.identity, in: posts).post
                merged ? metrics.writeConflict(.merged) : count(precondition)
                var json = PostJSON(updated, baseURL: request.baseURL)
                if merged { json.merged = true }
                var response = Response.json(json)
                response.headers[.eTag] = PostPrecondition.etag(updated.post.version)
                return response
            } catch let changed as PostChanged {
                guard let current = changed.current else { throw PostRepository.gone(published.id) }
                published = current
            }
        }
        return conflict(published, changes: changes, precondition, request)
    }

    /// `DELETE`: with `If-Match`, only the version named; a newer one is `412` and nothing is deleted.
    @Sendable func destroy(request: Request, context: SignedInContext) async throws -> Response {
        let published = try await posts.findOwn(in: context)
        let precondition = try required(PostPrecondition(request, bodyVersion: nil))
        guard precondition.holds(at: published.post.version) else { return conflict(published, changes: nil, precondition, request) }
        do {
            try await posts.delete(id: published.id, version: precondition.isUnconditional || precondition == .any ? nil : published.post.version)
        } catch let changed as PostChanged {
            return conflict(changed.current ?? published, changes: nil, precondition, request)
        }
        count(precondition)
        return Response(status: .noContent)
    }

    /// The precondition, or `428` when the operator requires one and there is none (RFC 6585).
    private func required(_ precondition: PostPrecondition) throws -> PostPrecondition {
        guard requirePreconditions, precondition.isUnconditional else { return precondition }
        metrics.writeConflict(.unconditional)
        throw AppError(
            .preconditionRequired, title: "Precondition required",
            message: "Say which version of the post you changed: send If-Match with the ETag you read (or \"*\" to overwrite whatever is there)."
        )
    }

    private func count(_ precondition: PostPrecondition) {
        switch precondition {
        case .none: metrics.writeConflict(.unconditional)
        case .any: metrics.writeConflict(.forced)
        case .ifMatch, .body: break
        }
    }

    /// The post changed since the client read it: `412` (`If-Match`) or `409` (a body's `version`) as
    /// `application/problem+json` (RFC 9457), with the post as it is now and the fields the write would overwrite.
    /// `fields`: those both sides changed, when the write could be compared with its version; else what it would
    /// overwrite.
    private func conflict(
        _ current: PublishedPost, changes: PostChanges?, _ precondition: PostPrecondition, _ request: Request, fields: [String]? = nil
    ) -> Response {
        metrics.writeConflict(.refused)
        let status = precondition.failureStatus
        let problem = ConflictJSON(
            type: "about:blank", title: "Someone changed this post", status: Int(status.code),
            detail: "The post is at version \(current.post.version), and your write changes what was changed since. Read it again (it is below) and send your change with its ETag, or If-Match: * to overwrite it.",
            post: PostJSON(current, baseURL: request.baseURL), conflictingFields: fields ?? changes.map { Self.overwritten(by: $0, in: current) } ?? []
        )
        var response = Response.json(problem, status: status)
        response.headers[.contentType] = "application/problem+json"
        response.headers[.eTag] = PostPrecondition.etag(current.post.version)
        return response
    }

    struct ConflictJSON: Encodable {
        let type: String
        let title: String
        let status: Int
        let detail: String
        let post: PostJSON
        let conflictingFields: [String]
    }

    /// The fields a write sets to something other than what the post has now: what it would overwrite.
    static func overwritten(by changes: PostChanges, in current: PublishedPost) -> [String] {
        var fields: [String] = []
        if let title = changes.title, title != current.post.title { fields.append("title") }
        if let content = changes.content, content != current.post.content { fields.append("content") }
        if changes.picture != nil { fields.append("picture") }
        if let alt = changes.alt, alt != current.picture?.alt { fields.append("alt") }
        return fields
    }

    /// `{"title", "content", "alt"}`, flat or under `post` as Rails clients send (`"picture": null` removes the
    /// picture), or a urlencoded or multipart form (`picture` a file).
    static func changes(from request: Request) async throws -> PostChanges {
        var request = request
        let buffer = try await request.collectBody(limitedTo: request.bodyLimit)
        if request.isForm {
            return try await PostsController.formChanges(request)
        }
        let object: [String: Any]
        do {
            guard let parsed = try JSONSerialization.jsonObject(with: Data(buffer: buffer)) as? [String: Any] else {
                throw AppError(.badRequest, message: Phrase("errors.not_json", ["expected": Self.expectedJSON]))
            }
            object = parsed
        } catch let error as AppError {
            throw error
        } catch {
            throw AppError(.badRequest, message: Phrase("errors.not_json", ["expected": Self.expectedJSON]))
        }
        let fields = object["post"] as? [String: Any] ?? object
        var wrongTypes: [String: [Phrase]] = [:]
        func text(_ name: String) -> String? {
            switch fields[name] {
            case nil: return nil
            case let value as String: return value
            default:
                wrongTypes[name] = [Phrase("errors.not_string")]
                return nil
            }
        }
        var changes = PostChanges(title: text("title"), content: text("content"), alt: text("alt"))
        if let version = fields["version"] {
            // Through JSONDecoder, which takes only a whole number (Foundation's NSNumber would take true and 2.5).
            if let data = try? JSONSerialization.data(withJSONObject: [version]), let number = try? JSONDecoder().decode([Int].self, from: data).first {
                changes.baseVersion = number
            } else {
                wrongTypes["version"] = [Phrase("posts.errors.version_number")]
            }
        }
        switch fields["picture"] {
        case nil: break
        case is NSNull: changes.picture = .remove
        default: wrongTypes["picture"] = [Phrase("posts.errors.picture_null")]
        }
        guard wrongTypes.isEmpty else { throw ValidationFailed(errors: wrongTypes) }
        return changes
    }

    /// RFC 8288 links to the first, previous, next and last pages, as GitHub's API gives them.
    static func linkHeader(_ page: PostRepository.Page, base: String) -> String {
        func link(_ number: Int, _ relation: String) -> String {
            "<\(base)?page=\(number)&per_page=\(page.perPage)>; rel=\"\(relation)\""
        }
        var links = [link(1, "first")]
        if page.hasPrevious { links.append(link(page.number - 1, "prev")) }
        if page.hasNext { links.append(link(page.number + 1, "next")) }
        links.append(link(page.lastPage, "last"))
        return links.joined(separator: ", ")
    }
}

extension HTTPField.Name {
    static let xTotalCount = HTTPField.Name("X-Total-Count")!
    static let link = HTTPField.Name("Link")!
    static let xOfflineCopyFrom = HTTPField.Name("X-Offline-Copy-From")!
}
