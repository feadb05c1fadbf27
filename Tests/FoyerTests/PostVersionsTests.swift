import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// Writes to a post name the version they were made from, so that none overwrites a newer one: `ETag` and
/// `If-Match` (RFC 9110), `version` in the body, `428` when required (RFC 6585), and the edit form's conflict page.
@Suite struct PostVersionsTests {
    static func write(
        _ client: some TestClientProtocol, _ method: HTTPRequest.Method = .patch, id: Int, token: String, ifMatch: String? = nil, _ body: String? = nil
    ) async throws -> (status: HTTPResponse.Status, json: [String: Any], headers: HTTPFields) {
        var headers = bearer(token).merging(jsonHeaders)
        if let ifMatch { headers[.ifMatch] = ifMatch }
        return try await client.execute(uri: "/api/v1/posts/\(id)", method: method, headers: headers, body: body.map { ByteBuffer(json: $0) }) {
            ($0.status, $0.body.readableBytes > 0 ? $0.json() : [:], $0.headers)
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aWriteGoesOnlyOverTheVersionItNamesAndAStaleOneGetsThePostAsItIsNow(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "First", content: "Words")
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                #expect(response.headers[.eTag] == #""1""# && response.json()["version"] as? Int == 1)
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get, headers: [.ifNoneMatch: #""1""#]) { #expect($0.status == .notModified) }

            let saved = try await Self.write(client, id: id, token: ada, ifMatch: #""1""#, #"{"title": "Second"}"#)
            #expect(saved.status == .ok && saved.json["version"] as? Int == 2 && saved.headers[.eTag] == #""2""#)
            // From the older read: refused, with the post as it is now and what the write would overwrite.
            let stale = try await Self.write(client, id: id, token: ada, ifMatch: #""1""#, #"{"title": "From an old tab", "content": "Words"}"#)
            #expect(stale.status == .preconditionFailed && stale.headers[.contentType] == "application/problem+json" && stale.headers[.eTag] == #""2""#)
            #expect((stale.json["post"] as? [String: Any])?["title"] as? String == "Second" && stale.json["conflicting_fields"] as? [String] == ["title"])
            let staleBody = try await Self.write(client, id: id, token: ada, #"{"title": "From an old tab", "version": 1}"#)
            #expect(staleBody.status == .conflict && (staleBody.json["post"] as? [String: Any])?["version"] as? Int == 2)
            // As swift-openapi-generator's clients send it: percent-encoded.
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: "%221%22", #"{"title": "Encoded, stale"}"#).status == .preconditionFailed)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get, headers: [.ifNoneMatch: "%222%22"]) { #expect($0.status == .notModified) }
            for refused in [#"W/"2""#, "2", #""two""#, "%25222%2522"] {
                #expect(try await Self.write(client, id: id, token: ada, ifMatch: refused, #"{"title": "Weak or malformed"}"#).status == .preconditionFailed, "\(refused)")
            }
            // Invalid data is 422 whatever version it names (Schemathesis found a 412 for an alt text too long).
            let tooLong = String(repeating: "g", count: 1001)
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: #"W/"w""#, #"{"alt": "\#(tooLong)"}"#).status == .unprocessableContent)
            for wrong in [#""2""#, "true", "2.5"] {
                #expect(try await Self.write(client, id: id, token: ada, #"{"title": "x", "version": \#(wrong)}"#).status == .unprocessableContent, "\(wrong)")
            }
            // The current version among several, `*`, the body's version, and none at all: applied.
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: #""9", "2""#, #"{"title": "Third"}"#).json["version"] as? Int == 3)
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: "%2A", #"{"title": "Fourth"}"#).json["version"] as? Int == 4)
            #expect(try await Self.write(client, .put, id: id, token: ada, #"{"title": "Fifth", "version": 4}"#).json["version"] as? Int == 5)
            #expect(try await Self.write(client, id: id, token: ada, #"{"content": "Sixth"}"#).json["version"] as? Int == 6)
            // A stale delete deletes nothing.
            #expect(try await Self.write(client, .delete, id: id, token: ada, ifMatch: #""5""#).status == .preconditionFailed)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { #expect($0.json()["title"] as? String == "Fifth") }
            #expect(try await Self.write(client, .delete, id: id, token: ada, ifMatch: #""6""#).status == .noContent)
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.text.contains(#"foyer_write_conflicts_total{resource="post",outcome="refused"} 8"#))
                #expect(response.text.contains(#"foyer_write_conflicts_total{resource="post",outcome="forced"} 1"#))
                #expect(response.text.contains(#"foyer_write_conflicts_total{resource="post",outcome="unconditional"} 1"#))
            }
        }
    }

    /// A write made from an older version that changes only fields nobody changed since is applied over the newer
    /// one, says so, and leaves the other change as it is (AeroGear DataSync's field-by-field rule); a field changed
    /// on both sides is the conflict, named.
    @Test(arguments: TestStoreKind.allCases) func aStaleWriteOfOtherFieldsIsMergedAndOneOfTheSameFieldIsNot(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "Plans", content: "Meet at noon.")
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: #""1""#, #"{"title": "Plans for Friday"}"#).status == .ok)
            // From version 1, a PUT sending the title back as it was and a new text: the text is merged, the title stays.
            let merged = try await Self.write(client, .put, id: id, token: ada, ifMatch: #""1""#, #"{"title": "Plans", "content": "Meet at one."}"#)
            #expect(merged.status == .ok && merged.json["merged"] as? Bool == true && merged.headers[.eTag] == #""3""#)
            #expect(merged.json["title"] as? String == "Plans for Friday" && merged.json["content"] as? String == "Meet at one.")
            // Again from version 1, the title: changed since by the first write.
            let both = try await Self.write(client, id: id, token: ada, #"{"title": "Plans for Saturday", "version": 1}"#)
            #expect(both.status == .conflict && both.json["conflicting_fields"] as? [String] == ["title"])
            // A write at the current version says nothing of merging.
            let plain = try await Self.write(client, id: id, token: ada, ifMatch: #""3""#, #"{"content": "Meet at two."}"#)
            #expect(plain.status == .ok && plain.json["merged"] == nil)
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.text.contains(#"foyer_write_conflicts_total{resource="post",outcome="merged"} 1"#))
            }
        }
    }

    /// Twenty writes made from one read, at once: one lands, nineteen are refused, and the version rose by one.
    @Test(arguments: TestStoreKind.allCases) func ofTwentyWritesFromOneReadExactlyOneLands(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test(.live) { client in
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "Raced")
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for number in 1...20 {
                    group.addTask { try await Self.write(client, .put, id: id, token: ada, ifMatch: #""1""#, #"{"title": "Writer \#(number)"}"#).status }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .ok }.count == 1 && statuses.filter { $0 == .preconditionFailed }.count == 19, "\(statuses)")
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { #expect($0.json()["version"] as? Int == 2) }
        }
    }

    /// Two writes made from one read, the second after the first landed: the store refuses the second (the check
    /// and the write are one statement, so no request can slip between them), and says what the post is now.
    @Test(arguments: TestStoreKind.allCases) func theStoreWritesOnlyOverTheVersionItWasRead(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await UserRepository(store: store, passwordHashCost: 4).create(email: TestUser.ada.email, password: TestUser.ada.password)
        let posts = PostRepository(store: store, blocks: Blocks(store: store), onChange: { _ in })
        let created = try await posts.create(PostChanges(title: "Once", content: "."), author: ada)
        let read = try #require(try await posts.find(id: created.id))
        let first = try await posts.update(read, with: PostChanges(title: "First"))
        #expect(first.post.version == 2)
        await #expect {
            _ = try await posts.update(read, with: PostChanges(title: "Second, from the same read"))
        } throws: { error in
            (error as? PostChanged)?.current?.post.version == 2 && (error as? PostChanged)?.current?.post.title == "First"
        }
        await #expect(throws: PostChanged.self) { try await posts.delete(id: created.id, version: 1) }
        try await posts.delete(id: created.id, version: 2)
        #expect(try await posts.find(id: created.id) == nil)
    }

    @Test func anOperatorMayRequireEveryWriteToNameItsVersion() async throws {
        let harness = try await TestHarness { $0.posts.requirePreconditions = true }
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada)
            let bare = try await Self.write(client, id: id, token: ada, #"{"title": "No version"}"#)
            #expect(bare.status == .preconditionRequired && (bare.json["error"] as? String ?? "").contains("If-Match"))
            #expect(try await Self.write(client, .delete, id: id, token: ada).status == .preconditionRequired)
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: #""1""#, #"{"title": "Named"}"#).status == .ok)
            #expect(try await Self.write(client, id: id, token: ada, #"{"title": "In the body", "version": 2}"#).status == .ok)
            #expect(try await Self.write(client, .delete, id: id, token: ada, ifMatch: "*").status == .noContent)
        }
    }

    /// A form saved from an older version that changes another field than what was saved meanwhile lands, merged.
    @Test(arguments: TestStoreKind.allCases) func aStaleFormSaveOfAnotherFieldIsMerged(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let session = try await browserSession(client)
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "Shared", content: "As it was")
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: #""1""#, #"{"title": "Renamed on the phone"}"#).status == .ok)
            let saved = try await client.execute(
                uri: "/posts/\(id)", method: .post, headers: session.headers,
                body: formBody([("authenticity_token", session.csrf), ("_method", "patch"), ("version", "1"), ("title", "Shared"), ("content", "Typed on the laptop")])
            ) { $0 }
            #expect(saved.status == .seeOther && saved.headers[.setCookie]?.contains("post-merged") == true)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                #expect(response.json()["title"] as? String == "Renamed on the phone" && response.json()["content"] as? String == "Typed on the laptop")
            }
        }
    }

    /// The edit form carries its version; a save from an older one shows both versions and the form again with what
    /// was typed, at the current version, and saving from it lands.
    @Test(arguments: TestStoreKind.allCases) func aStaleFormSaveIsAConflictPageAndSavingFromItLands(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let session = try await browserSession(client)
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "Shared", content: "As it was")
            try await client.execute(uri: "/posts/\(id)/edit", method: .get, headers: session.headers) { response in
                #expect(response.text.contains(#"<input type="hidden" name="version" value="1">"#))
            }
            #expect(try await Self.write(client, id: id, token: ada, ifMatch: #""1""#, #"{"content": "Changed on the phone"}"#).status == .ok)
            func save(_ version: Int, content: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/posts/\(id)", method: .post, headers: session.headers,
                    body: formBody([
                        ("authenticity_token", session.csrf), ("_method", "patch"), ("version", "\(version)"), ("title", "Shared"), ("content", content),
                    ])
                ) { $0 }
            }
            let conflict = try await save(1, content: "Typed on the laptop")
            #expect(conflict.status == .conflict)
            #expect(conflict.text.contains("<h1>Someone changed this post</h1>") && conflict.text.contains("Changed on the phone"))
            #expect(conflict.text.contains(#"<textarea id="post-content" name="content""#) && conflict.text.contains("Typed on the laptop</textarea>"))
            #expect(conflict.text.contains(#"<input type="hidden" name="version" value="2">"#))
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { #expect($0.json()["content"] as? String == "Changed on the phone") }
            #expect(try await save(2, content: "Typed on the laptop").status == .seeOther)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                #expect(response.json()["content"] as? String == "Typed on the laptop" && response.json()["version"] as? Int == 3)
            }
        }
    }

    /// A post its author deleted answers `410` to reads and writes (a form or a queue opened before then learns why),
    /// an id that never was `404`; the form's save shows what was typed, ready to publish as a new post.
    @Test(arguments: TestStoreKind.allCases) func aDeletedPostIsGoneAndItsFormKeepsWhatWasTyped(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let session = try await browserSession(client)
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "Short-lived", content: "Soon gone")
            #expect(try await Self.write(client, .delete, id: id, token: ada, ifMatch: #""1""#).status == .noContent)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { #expect($0.status == .gone) }
            for method: HTTPRequest.Method in [.patch, .put, .delete] {
                let gone = try await Self.write(client, method, id: id, token: ada, ifMatch: #""1""#, method == .delete ? nil : #"{"title": "Too late"}"#)
                #expect(gone.status == .gone && (gone.json["error"] as? String ?? "").contains("deleted"), "\(method)")
            }
            #expect(try await Self.write(client, id: id + 1000, token: ada, #"{"title": "Never was"}"#).status == .notFound)
            let typed = try await client.execute(
                uri: "/posts/\(id)", method: .post, headers: session.headers,
                body: formBody([("authenticity_token", session.csrf), ("_method", "patch"), ("version", "1"), ("title", "Too late"), ("content", "Typed meanwhile")])
            ) { $0 }
            #expect(typed.status == .gone && typed.text.contains("was deleted by its author"))
            #expect(typed.text.contains(#"<form action="/posts" method="post""#) && typed.text.contains("Typed meanwhile</textarea>"))
            #expect(!typed.text.contains(#"name="version""#))
        }
    }

    /// The edit form follows the posts stream and has a place for "saved elsewhere", at the version it shows.
    @Test func anEditFormHasASlotForANewerVersionAndTheStreamFillsIt() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let session = try await browserSession(client)
            let (ada, _) = try await signIn(client)
            let id = try await createPost(client, token: ada, title: "Open", content: "In a form")
            try await client.execute(uri: "/posts/\(id)/edit", method: .get, headers: session.headers) { response in
                #expect(response.text.contains("<turbo-stream-source src=\"/streams/"))
                #expect(response.text.contains(#"<p id="post_\#(id)_changed" data-version="1" hidden></p>"#))
            }
        }
        let views = try Views(
            directory: packageRoot + "/Templates", turboScriptURL: "/turbo.min.js", offline: false, languages: try Languages.bundled()
        )
        let store = try await Store.fresh(.sqlite)
        defer { store.close() }
        let ada = try await UserRepository(store: store, passwordHashCost: 4).create(email: TestUser.ada.email, password: TestUser.ada.password)
        let posts = PostRepository(store: store, blocks: Blocks(store: store), onChange: { _ in })
        let created = try await posts.create(PostChanges(title: "Open", content: "."), author: ada)
        let saved = try await posts.update(created, with: PostChanges(title: "Saved elsewhere"))
        let html = PostFragments(views: views).html(for: .updated(saved), in: views.languages.fallback)
        #expect(html.contains(#"<turbo-stream action="replace" target="post_\#(saved.id)_changed">"#))
        #expect(html.contains(#"role="status" data-version="2">"#) && html.contains("saved a newer version of this post"))
    }

    /// The newest 50 versions are kept: a write made from one older than those cannot be merged, and is a conflict.
    @Test(arguments: TestStoreKind.allCases) func onlyTheNewestVersionsAreKept(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await UserRepository(store: store, passwordHashCost: 4).create(email: TestUser.ada.email, password: TestUser.ada.password)
        let posts = PostRepository(store: store, blocks: Blocks(store: store), onChange: { _ in })
        var post = try await posts.create(PostChanges(title: "Busy", content: "0"), author: ada)
        for edit in 1...(PostVersionRows.kept + 5) { post = try await posts.update(post, with: PostChanges(content: "\(edit)")) }
        #expect(post.post.version == PostVersionRows.kept + 6)
        #expect(try await posts.snapshot(of: post.id, at: 6) == nil)
        #expect(try await posts.snapshot(of: post.id, at: 7)?.content == "6")
        #expect(try await posts.merge(PostChanges(title: "From long ago"), from: .ifMatch([1]), into: post) == nil)
        #expect(try await posts.merge(PostChanges(title: "From lately"), from: .ifMatch([7]), into: post) != nil)
    }
}
