import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// Creates a post through the API and returns its id.
func createPost(_ client: some TestClientProtocol, token: String, title: String = "A title", content: String = "Some words") async throws -> Int {
    let body = try JSONSerialization.data(withJSONObject: ["title": title, "content": content])
    return try await client.execute(
        uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(bytes: body)
    ) { response in
        #expect(response.status == .created, "\(response.text)")
        return try #require(response.json()["id"] as? Int)
    }
}

/// A cookie-signed-in browser: its cookie header and the CSRF token its pages carry.
func browserSession(_ client: some TestClientProtocol, as user: TestUser = .ada) async throws -> (headers: HTTPFields, csrf: String) {
    let (token, _) = try await signIn(client, as: user)
    let csrf = try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { try csrfToken(in: $0.text) }
    return (cookieHeader(token).merging(formHeaders), csrf)
}

@Suite struct PostPagesTests {
    @Test func listIsPublicNewestFirstAndPaginated() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            for number in 1...23 { _ = try await createPost(client, token: token, title: "Post number \(number)") }
            try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .ok)
                let text = response.text
                let first = try #require(text.range(of: "Post number 23"))
                let second = try #require(text.range(of: "Post number 22"))
                #expect(first.lowerBound < second.lowerBound)
                #expect(!text.contains("Post number 3<"))
                #expect(text.contains(#"<a rel="next" href="/posts?page=2">"#))
                #expect(text.contains("Page 1 of 2"))
            }
            try await client.execute(uri: "/posts?page=2", method: .get) { response in
                #expect(response.text.contains("Post number 3<"))
                #expect(response.text.contains(#"rel="prev""#))
            }
            try await client.execute(uri: "/posts?page=zero", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .badRequest)
                #expect(response.text.contains("page must be a whole number"))
            }
        }
    }

    @Test func showRendersPlainTextAsEscapedParagraphs() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let id = try await createPost(client, token: token, title: "<b>Bold</b> & co", content: "First <script>alert(1)</script>\nline two\n\nSecond paragraph")
            try await client.execute(uri: "/posts/\(id)", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains("&lt;b&gt;Bold&lt;/b&gt; &amp; co"))
                #expect(response.text.contains("<p>First &lt;script&gt;alert(1)&lt;/script&gt;<br>\nline two</p>\n<p>Second paragraph</p>"))
                #expect(!response.text.contains("<script>alert"))
            }
        }
    }

    @Test func unknownPostIsA404Page() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for path in ["/posts/999", "/posts/abc", "/posts/999/edit"] {
                let (headers, _) = try await browserSession(client)
                try await client.execute(uri: path, method: .get, headers: headers) { response in
                    #expect(response.status == .notFound, "\(path)")
                    #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                    #expect(response.text.contains("/turbo.min.js"))
                }
            }
        }
    }

    @Test func writingNeedsASignedInUser() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/posts/new", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .unauthorized)
                #expect(response.text.contains(#"name="return_to" value="/posts/new""#))
            }
            try await client.execute(uri: "/posts", method: .post, headers: formHeaders, body: formBody([("title", "Sneaky")])) { response in
                #expect(response.status == .unauthorized)
            }
            #expect(try await harness.database.read { try Post.fetchCount($0) } == 0)
        }
    }

    @Test func createRedirects303ToThePostOrToRefreshForNativeShells() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (headers, csrf) = try await browserSession(client)
            try await client.execute(uri: "/posts/new", method: .get, headers: headers) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#"<form action="/posts" method="post""#))
            }
            let location = try await client.execute(
                uri: "/posts", method: .post, headers: headers,
                body: formBody([("authenticity_token", csrf), ("title", "From the form"), ("content", "Hello")])
            ) { response in
                #expect(response.status == .seeOther)
                return try #require(response.headers[.location])
            }
            #expect(location.hasPrefix("/posts/"))
            try await client.execute(uri: location, method: .get) { response in
                #expect(response.text.contains("From the form"))
            }
            var native = headers
            native[.userAgent] = "Hotwire Native Android"
            try await client.execute(
                uri: "/posts", method: .post, headers: native,
                body: formBody([("authenticity_token", csrf), ("title", "From the app"), ("content", "")])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/refresh_historical_location")
            }
        }
    }

    @Test func invalidFormIs422WithMessagesAndNothingStored() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (headers, csrf) = try await browserSession(client)
            try await client.execute(
                uri: "/posts", method: .post, headers: headers,
                body: formBody([("authenticity_token", csrf), ("title", "   "), ("content", "kept text")])
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains("Title can&#39;t be blank") || response.text.contains("Title can't be blank"))
                #expect(response.text.contains("kept text"), "the form keeps what was typed")
                #expect(response.text.contains(#"aria-invalid="true""#))
            }
            try await client.execute(
                uri: "/posts", method: .post, headers: headers,
                body: formBody([("authenticity_token", csrf), ("title", String(repeating: "x", count: 201))])
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains("is too long (maximum is 200 characters)"))
            }
            #expect(try await harness.database.read { try Post.fetchCount($0) } == 0)
        }
    }

    @Test func onlyTheAuthorMayEditOrDelete() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (adaToken, _) = try await signIn(client)
            let id = try await createPost(client, token: adaToken, title: "Ada's")
            let (bob, bobCSRF) = try await browserSession(client, as: .bob)
            try await client.execute(uri: "/posts/\(id)/edit", method: .get, headers: bob) { response in
                #expect(response.status == .forbidden)
                #expect(response.text.contains("Only the author"))
            }
            for method in ["patch", "delete"] {
                try await client.execute(
                    uri: "/posts/\(id)", method: .post, headers: bob,
                    body: formBody([("_method", method), ("authenticity_token", bobCSRF), ("title", "Bob was here")])
                ) { response in
                    #expect(response.status == .forbidden)
                }
            }
            try await client.execute(uri: "/posts/\(id)", method: .get, headers: bob) { response in
                #expect(response.text.contains("Ada&#39;s") || response.text.contains("Ada's"))
                #expect(!response.text.contains("/edit\""), "no edit link for someone else's post")
            }
        }
    }

    @Test func authorEditsWithPatchOverrideAndRealPatchThenDeletes() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (headers, csrf) = try await browserSession(client)
            let (token, _) = try await signIn(client)
            let id = try await createPost(client, token: token, title: "Before")
            try await client.execute(uri: "/posts/\(id)/edit", method: .get, headers: headers) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#"<meta name="turbo-cache-control" content="no-cache">"#))
                #expect(response.text.contains(#"name="_method" value="patch""#))
                #expect(response.text.contains(#"value="Before""#))
            }
            try await client.execute(
                uri: "/posts/\(id)", method: .post, headers: headers,
                body: formBody([("_method", "patch"), ("authenticity_token", csrf), ("title", "After"), ("content", "new")])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/posts/\(id)")
            }
            var patch = headers
            patch[CSRFMiddleware.headerName] = csrf
            try await client.execute(uri: "/posts/\(id)", method: .patch, headers: patch, body: formBody([("title", "")])) { response in
                #expect(response.status == .unprocessableContent)
            }
            try await client.execute(uri: "/posts/\(id)", method: .get) { response in
                #expect(response.text.contains("After"))
                #expect(response.text.contains("edited"))
            }
            try await client.execute(uri: "/posts/\(id)", method: .delete, headers: patch) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/posts")
            }
            try await client.execute(uri: "/posts/\(id)", method: .get) { response in
                #expect(response.status == .gone, "deleted by its author, which a reader may be told")
            }
        }
    }

    @Test func cookieWritesNeedTheCSRFToken() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (headers, _) = try await browserSession(client)
            try await client.execute(uri: "/posts", method: .post, headers: headers, body: formBody([("title", "No token")])) { response in
                #expect(response.status == .forbidden)
            }
            #expect(try await harness.database.read { try Post.fetchCount($0) } == 0)
        }
    }

    @Test func embeddedDefaultSeedsSamplePostsOnlyOnAnEmptyDatabase() async throws {
        let harness = try await TestHarness { $0.demoAccount = nil }
        try await harness.test { client in
            try await client.execute(uri: "/api/v1/posts", method: .get) { response in
                #expect(response.text == "[]")
            }
        }
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        var config = harness.config
        config.demoAccount = .init(email: "demo@example.com", password: "demo password")
        let app = try await buildApplication(config, store: .sqlite(database))
        try await app.test(.live) { client in
            // The demo account is made after the server starts listening; /healthz says when.
            for _ in 0..<100 {
                let status = try await client.execute(uri: "/healthz", method: .get) { $0.status }
                if status == .ok { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            try await client.execute(uri: "/api/v1/posts", method: .get) { response in
                #expect(response.headers[.xTotalCount] == String(SamplePosts.samples.count))
            }
        }
    }
}

/// A list row's excerpt: the text's words one space apart, cut at 160 characters with "…".
@Suite struct PostExcerptTests {
    /// What the excerpt was before it stopped reading at the cut: the whole text split, joined, then cut.
    static func whole(_ text: String, length: Int = 160) -> String {
        let flattened = text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        return flattened.count <= length ? flattened : String(flattened.prefix(length)) + "…"
    }

    @Test(arguments: [
        "", "   ", "one", "  two  words \n\n here\t", String(repeating: "a", count: 159), String(repeating: "a", count: 160),
        String(repeating: "a", count: 161), String(repeating: "a", count: 159) + " b", String(repeating: "a", count: 160) + " b",
        String(repeating: "a", count: 160) + "   ", String(repeating: "word ", count: 100), "e\u{301} " + String(repeating: "é ", count: 90),
        "中文 " + String(repeating: "字", count: 200), "line\r\nbreak\u{2028}and\u{00A0}space", "tab\tvertical\u{0B}feed\u{0C}separators\u{1C}\u{1F}next\u{85}end", "crlf\r\n\r\nonly ascii\r\n", "file\u{1C}group\u{1D}record\u{1E}unit\u{1F}end \u{7F}",
        String(repeating: "x", count: 120) + " é " + String(repeating: "y", count: 60),
    ])
    func anExcerptIsTheWholeTextsWordsCutAtTheLength(text: String) {
        #expect(PostText.excerpt(text) == Self.whole(text))
    }

    @Test func theCutFallsAtTheLengthExactly() {
        #expect(PostText.excerpt(String(repeating: "a", count: 160)) == String(repeating: "a", count: 160))
        #expect(PostText.excerpt(String(repeating: "a", count: 161)) == String(repeating: "a", count: 160) + "…")
        #expect(PostText.excerpt("abc def", length: 3) == "abc…")
        #expect(PostText.excerpt("abc def", length: 4) == "abc …")
        #expect(PostText.excerpt("abc def", length: 7) == "abc def")
    }
}

@Suite struct PostListCacheTests {
    @Test func listsShowEveryWriteAtOnce() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            func page() async throws -> String {
                try await client.execute(uri: "/posts", method: .get, headers: cookieHeader(token)) { $0.text }
            }
            func json() async throws -> String {
                try await client.execute(uri: "/api/v1/posts", method: .get) { $0.text }
            }
            let id = try await createPost(client, token: token, title: "First title")
            #expect(try await page().contains("First title"))
            #expect(try await json().contains("First title"))

            _ = try await createPost(client, token: token, title: "Second post")
            #expect(try await page().contains("Second post"))
            #expect(try await json().contains("Second post"))

            try await client.execute(
                uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(json: #"{"title": "Renamed"}"#)
            ) { #expect($0.status == .ok) }
            #expect(try await page().contains("Renamed"))
            #expect(try await !page().contains("First title"))
            #expect(try await json().contains("Renamed"))

            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer(token)) { #expect($0.status == .noContent) }
            #expect(try await !page().contains("Renamed"))
            #expect(try await !json().contains("Renamed"))
        }
    }

    @Test func signedInAndAnonymousListsDiffer() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/posts", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.text.contains(#"href="/posts/new""#))
            }
            try await client.execute(uri: "/posts", method: .get) { response in
                #expect(!response.text.contains(#"href="/posts/new""#))
            }
        }
    }

    @Test func cachedJSONNamesTheBaseURLAsked() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            _ = try await createPost(client, token: token)
            for scheme in ["http", "https", "http"] {
                let headers: HTTPFields = scheme == "https" ? [HTTPField.Name("X-Forwarded-Proto")!: "https"] : [:]
                try await client.execute(uri: "/api/v1/posts", method: .get, headers: headers) { response in
                    #expect(response.text.contains("\(scheme)://localhost/posts/"))
                    #expect(response.headers[HTTPField.Name("Link")!]?.contains("\(scheme)://localhost/api/v1/posts") == true)
                }
            }
        }
    }
}
