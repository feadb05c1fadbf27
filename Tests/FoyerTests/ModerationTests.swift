import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import Foyer

/// Terms accepted before posting, the operator's address, and roles.
@Suite struct TermsTests {
    static let carol = TestUser(email: "carol@example.com", password: "carol's own words")

    /// Carol's account as a provider makes one: she never accepted the terms.
    static func addCarol(to harness: TestHarness) async throws {
        let users = UserRepository(store: harness.store, passwordHashCost: 4)
        let hash = try await users.passwords.hash(carol.password)
        _ = try await harness.store.userStorage.insert(User(email: carol.email, name: "Carol", passwordHash: hash, createdAt: Date()))
    }

    static let newPost = ByteBuffer(json: #"{"title": "Hello", "content": "First words"}"#)

    @Test(arguments: TestStoreKind.allCases) func anAccountThatHasNotAcceptedTheTermsMayReadButNotPostUntilItAccepts(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await Self.addCarol(to: harness)
        try await harness.test { client in
            let (token, _) = try await signIn(client, as: Self.carol)
            let json = bearer(token).merging([.contentType: "application/json"])
            try await client.execute(uri: "/api/v1/posts", method: .get, headers: bearer(token)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { response in
                #expect(response.status == .forbidden)
                let body = response.json()
                #expect(body["error"] as? String == "terms_not_accepted" && body["terms_url"] as? String == "/terms")
            }
            let version = try await client.execute(uri: "/terms", method: .get, headers: bearer(token).merging([.accept: "application/json"])) { response in
                let body = response.json()
                #expect(body["accepted"] as? Bool == false)
                return try #require(body["version"] as? String)
            }
            #expect(version.count == 16)
            // A page that would show the form shows the terms and their button instead.
            try await client.execute(uri: "/posts/new", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.status == .forbidden)
                #expect(response.text.contains(#"action="/terms/accept""#) && response.text.contains("Zero tolerance"))
            }
            try await client.execute(uri: "/api/v1/me/terms", method: .post, headers: json, body: ByteBuffer(json: #"{"version": "0000000000000000"}"#)) { response in
                #expect(response.status == .unprocessableContent)
                #expect((response.json()["errors"] as? [String: [String]])?["version"] != nil)
            }
            try await client.execute(uri: "/api/v1/me/terms", method: .post, headers: json, body: ByteBuffer(json: #"{"version": "\#(version)"}"#)) { response in
                #expect(response.status == .ok)
                #expect(response.json()["accepted"] as? Bool == true)
            }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { #expect($0.status == .created) }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.json()["terms_accepted_at"] is String)
            }
        }
    }

    @Test func theButtonOnTheTermsPageAcceptsThemAndReturnsToTheForm() async throws {
        let harness = try await TestHarness()
        try await Self.addCarol(to: harness)
        try await harness.test { client in
            let (token, _) = try await signIn(client, as: Self.carol)
            let csrf = try await client.execute(uri: "/terms?return_to=/posts/new", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.text.contains(#"name="return_to" value="/posts/new""#))
                return try csrfToken(in: response.text)
            }
            var headers = cookieHeader(token)
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: "/terms/accept", method: .post, headers: headers, body: formBody([("authenticity_token", csrf), ("return_to", "/posts/new")])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/posts/new")
            }
            try await client.execute(uri: "/posts/new", method: .get, headers: cookieHeader(token)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/terms", method: .get, headers: cookieHeader(token)) { response in
                #expect(!response.text.contains(#"action="/terms/accept""#) && response.text.contains("You accepted these terms on"))
            }
        }
    }

    @Test func signingUpNeedsTheTermsAcceptedAndCountsAsAccepting() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for refused in [#""accept_terms": false"#, #""accept_terms": "0""#, #""ignored": 1"#] {
                let body = #"{"name": "Dee", "email": "dee@example.com", "password": "dee's fine words", \#(refused)}"#
                try await client.execute(uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: body)) { response in
                    #expect(response.status == .unprocessableContent)
                    #expect(response.json()["errors"] as? [String: [String]] == ["accept_terms": ["must be accepted"]])
                }
            }
            let body = #"{"name": "Dee", "email": "dee@example.com", "password": "dee's fine words", "accept_terms": true}"#
            let token = try await client.execute(uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: body)) { response in
                #expect(response.status == .created)
                return try #require(response.headers[.xSessionToken])
            }
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging([.contentType: "application/json"]), body: Self.newPost
            ) { #expect($0.status == .created) }
            // The form says what is missing beside the checkbox.
            try await client.execute(uri: "/sign_up", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains(#"name="accept_terms""#) && response.text.contains(#"href="/terms""#))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func newTermsAreAcceptedAgainAndTheFirstCoverAccountsMadeBeforeThem(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-terms-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent("terms.md")
        try "# Our terms\n\nBe **kind**. No objectionable content.\n".write(to: file, atomically: true, encoding: .utf8)
        var config = harness.config
        config.moderation.termsFile = file.path
        config.moderation.contactEmail = "help@example.org"
        // Ada was made by the operator before any terms were served: the first terms count as accepted.
        let firstApp = try await buildApplication(config, store: harness.store)
        try await firstApp.test(.router) { client in
            let (token, _) = try await signIn(client)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging([.contentType: "application/json"]), body: Self.newPost
            ) { #expect($0.status == .created) }
            try await client.execute(uri: "/terms", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains("<h1>Our terms</h1>") && response.text.contains("<strong>kind</strong>"))
            }
            try await client.execute(uri: "/contact", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains("mailto:help@example.org"))
                #expect(response.text.contains(#"<a href="/terms">Terms</a>"#) && response.text.contains(#"<a href="/contact">Contact</a>"#))
            }
        }
        try "# Our terms\n\nBe **kind**. No objectionable content, and no abuse.\n".write(to: file, atomically: true, encoding: .utf8)
        // The first app's end closed its store: the second opens its own on the same tables.
        let changedApp = try await buildApplication(config, store: try await Store.reopen(harness.store))
        try await changedApp.test(.router) { client in
            let (token, _) = try await signIn(client)
            let json = bearer(token).merging([.contentType: "application/json"])
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { response in
                #expect(response.status == .forbidden)
            }
            try await client.execute(uri: "/api/v1/me/terms", method: .post, headers: json) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { #expect($0.status == .created) }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func rolesAreGivenByAddressAndShownToTheirHolder(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        let users = UserRepository(store: harness.store, passwordHashCost: 4)
        #expect(try await users.setRole(.moderator, email: " ADA@example.com ")?.role == .moderator)
        #expect(try await users.setRole(.admin, email: "nobody@example.com") == nil)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.json()["role"] as? String == "moderator")
            }
        }
        let store = try await Store.reopen(harness.store)
        defer { store.close() }
        #expect(try await UserRepository(store: store).setRole(nil, email: "ada@example.com")?.role == nil)
        #expect(try await store.userStorage.find(email: "ada@example.com")?.role == nil)
    }
}
