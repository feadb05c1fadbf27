import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct PostsAPITests {
    func list(_ client: some TestClientProtocol, _ uri: String) async throws -> (TestResponse, [[String: Any]]) {
        try await client.execute(uri: uri, method: .get) { response in
            let array = (try? JSONSerialization.jsonObject(with: Data(response.text.utf8))) as? [[String: Any]]
            return (response, try #require(array, "\(response.status) \(response.text)"))
        }
    }

    @Test(arguments: TestStoreKind.allCases) func listHasTheDocumentedShapeOnBothPaths(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let id = try await createPost(client, token: token, title: "Shaped", content: "Body")
            for path in ["/api/v1/posts", "/posts.json"] {
                let (response, posts) = try await list(client, path)
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json; charset=utf-8")
                let post = try #require(posts.first)
                #expect(Set(post.keys) == ["id", "title", "content", "created_at", "updated_at", "version", "url", "author", "picture"])
                #expect(post["picture"] is NSNull, "null, not absent, for a post without one")
                #expect(post["id"] as? Int == id)
                #expect(post["title"] as? String == "Shaped")
                #expect((post["created_at"] as? String)?.hasSuffix("Z") == true)
                #expect((post["url"] as? String)?.hasSuffix("/posts/\(id)") == true)
                let author = try #require(post["author"] as? [String: Any])
                // Readable without signing in: the author by name and id, never by address.
                #expect(Set(author.keys) == ["id", "name"])
                #expect(author["name"] as? String == "ada")
            }
        }
    }

    /// A post is kept encoded until posts change: what it shows is never older than the last edit, rename or delete.
    @Test(arguments: TestStoreKind.allCases) func aPostReadAgainShowsEveryChangeToItOrItsAuthor(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let bearer: HTTPFields = [.authorization: "Bearer \(token)", .contentType: "application/json"]
            let id = try await createPost(client, token: token, title: "Before")
            func read() async throws -> (title: String?, author: String?, status: HTTPResponse.Status) {
                try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                    let post = (try? JSONSerialization.jsonObject(with: Data(response.text.utf8))) as? [String: Any]
                    return (post?["title"] as? String, (post?["author"] as? [String: Any])?["name"] as? String, response.status)
                }
            }
            #expect(try await read().title == "Before")
            #expect(try await read().title == "Before")
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer, body: ByteBuffer(string: #"{"title": "After"}"#)) {
                #expect($0.status == .ok)
            }
            #expect(try await read().title == "After")
            try await client.execute(uri: "/api/v1/me", method: .patch, headers: bearer, body: ByteBuffer(string: #"{"name": "Ada Lovelace"}"#)) {
                #expect($0.status == .ok)
            }
            #expect(try await read().author == "Ada Lovelace")
            let (_, posts) = try await list(client, "/api/v1/posts")
            #expect((posts.first?["author"] as? [String: Any])?["name"] as? String == "Ada Lovelace")
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer) { #expect($0.status == .noContent) }
            #expect(try await read().status == .gone)
        }
    }

    @Test(arguments: TestStoreKind.allCases) func pagingWithLinkHeader(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            for number in 1...5 { _ = try await createPost(client, token: token, title: "P\(number)") }
            let (response, posts) = try await list(client, "/api/v1/posts?page=2&per_page=2")
            #expect(posts.map { $0["title"] as? String } == ["P3", "P2"])
            #expect(response.headers[.xTotalCount] == "5")
            let link = try #require(response.headers[HTTPField.Name("Link")!])
            #expect(link.contains(#"/api/v1/posts?page=3&per_page=2>; rel="next""#))
            #expect(link.contains(#"/api/v1/posts?page=1&per_page=2>; rel="prev""#))
            #expect(link.contains(#"/api/v1/posts?page=3&per_page=2>; rel="last""#))
            for bad in ["per_page=101", "per_page=0", "page=-1", "page=two"] {
                try await client.execute(uri: "/api/v1/posts?\(bad)", method: .get) { response in
                    #expect(response.status == .badRequest, "\(bad)")
                    #expect(response.json()["error"] is String)
                }
            }
        }
    }

    @Test func bearerCRUDWithoutCSRF() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let auth = bearer(token).merging(jsonHeaders)
            let id = try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: auth,
                body: ByteBuffer(json: #"{"post": {"title": "Nested, Rails style", "content": "x"}}"#)
            ) { response in
                #expect(response.status == .created)
                #expect(response.headers[.location]?.hasSuffix("/api/v1/posts/\(response.json()["id"] as? Int ?? -1)") == true)
                return try #require(response.json()["id"] as? Int)
            }
            for path in ["/api/v1/posts/\(id)", "/posts/\(id).json"] {
                try await client.execute(uri: path, method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(response.json()["title"] as? String == "Nested, Rails style")
                }
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .patch, headers: auth, body: ByteBuffer(json: #"{"content": "only content"}"#)) { response in
                #expect(response.status == .ok)
                #expect(response.json()["title"] as? String == "Nested, Rails style", "PATCH leaves absent fields alone")
                #expect(response.json()["content"] as? String == "only content")
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer(token)) { response in
                #expect(response.status == .noContent)
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                #expect(response.status == .gone)
                #expect(response.json()["error"] is String)
            }
        }
    }

    @Test func validationErrorsAre422WithFieldMessages() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let auth = bearer(token).merging(jsonHeaders)
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: auth, body: ByteBuffer(json: #"{"content": "no title"}"#)) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.json()["errors"] as? [String: [String]] == ["title": ["can't be blank"]])
            }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: auth, body: ByteBuffer(json: #"{"title": 42}"#)) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.json()["errors"] as? [String: [String]] == ["title": ["must be a string"]])
            }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: auth, body: ByteBuffer(json: #"{"title": "#)) { response in
                #expect(response.status == .badRequest)
            }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: auth, body: ByteBuffer(json: #"["title"]"#)) { response in
                #expect(response.status == .badRequest)
            }
            #expect(try await harness.database.read { try Post.fetchCount($0) } == 0)
        }
    }

    @Test func authErrorsAreJSON() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let (bob, _) = try await signIn(client, as: .bob)
            let id = try await createPost(client, token: ada)
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: jsonHeaders, body: ByteBuffer(json: #"{"title": "x"}"#)) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate] == "Bearer")
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer(bob).merging(jsonHeaders), body: ByteBuffer(json: #"{"title": "mine now"}"#)) { response in
                #expect(response.status == .forbidden)
                #expect(response.json()["error"] is String)
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer(bob)) { response in
                #expect(response.status == .forbidden)
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                #expect(response.json()["title"] as? String == "A title")
            }
        }
    }

    @Test func cookieWritesToTheAPIKeepTheCSRFRule() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (session, csrf) = try await browserSession(client)
            var headers = session
            headers[.contentType] = "application/json"
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: headers, body: ByteBuffer(json: #"{"title": "x"}"#)) { response in
                #expect(response.status == .forbidden)
            }
            headers[CSRFMiddleware.headerName] = csrf
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: headers, body: ByteBuffer(json: #"{"title": "x"}"#)) { response in
                #expect(response.status == .created)
            }
        }
    }
}

@Suite struct PostValidationTests {
    @Test func lengthsCountCodePointsNotGraphemes() {
        // 100 skin-toned thumbs: 100 graphemes, 200 code points.
        let thumbs = String(repeating: "👍🏽", count: 100)
        #expect(PostChanges(title: thumbs).validationErrors(creating: true).isEmpty)
        #expect(PostChanges(title: thumbs + "x").validationErrors(creating: true)["title"] == [Phrase("errors.too_long", count: 200)])
    }

    @Test func blankMeansOnlyWhiteSpaceAsTheOpenAPIPatternSeesIt() {
        for blank in ["", "   ", "\n\t", "\u{1C}\u{1F}", "\u{2003}\u{3000}"] {
            #expect(blank.isBlank, "\(blank.unicodeScalars.map(\.value))")
        }
        for visible in ["a", " a ", "\u{200B}", "\u{01}"] {
            #expect(!visible.isBlank, "\(visible.unicodeScalars.map(\.value))")
        }
    }

    @Test func titlesAreStoredAsSent() {
        var post = Post(id: nil, title: "", content: "", authorId: 1, createdAt: Date(), updatedAt: Date())
        PostChanges(title: "  spaced  ", content: nil).apply(to: &post)
        #expect(post.title == "  spaced  ")
    }
}

@Suite struct PostJSONTypesTests {
    @Test func nullIsNotAString() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(json: #"{"title": "ok", "content": null}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.json()["errors"] as? [String: [String]] == ["content": ["must be a string"]])
            }
        }
    }
}
