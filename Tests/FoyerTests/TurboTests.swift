import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct TurboTests {
    @Test func nativeShellGetsNoWebNavigationAndVaryUserAgent() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for agent in ["Mozilla/5.0 (iPhone) Hotwire Native iOS; Turbo Native iOS", "Mozilla/5.0 (Linux; Android 14) Turbo Native Android"] {
                try await client.execute(uri: "/", method: .get, headers: [.userAgent: agent]) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers[.vary] == "User-Agent, Accept-Language, Accept-Encoding")
                    #expect(!response.text.contains("site-nav"), "\(agent)")
                    #expect(response.text.contains(#"<body class="native">"#))
                }
            }
            try await client.execute(uri: "/", method: .get, headers: browserHeaders) { response in
                #expect(response.headers[.vary] == "User-Agent, Accept-Language, Accept-Encoding")
                #expect(response.text.contains("site-nav"))
            }
        }
    }

    @Test func historicalLocationRoutesAnswer200HTML() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for name in ["recede", "resume", "refresh"] {
                try await client.execute(uri: "/\(name)_historical_location", method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers[.contentType] == "text/html; charset=utf-8")
                    #expect(response.text.contains("/turbo.min.js"))
                }
            }
        }
    }

    @Test func afterSubmitSendsNativeShellsToAHistoricalLocation() {
        let browser = Request(head: HTTPRequest(method: .post, scheme: nil, authority: nil, path: "/x", headerFields: [.userAgent: "Firefox"]), body: .init(buffer: ByteBuffer()))
        let native = Request(head: HTTPRequest(method: .post, scheme: nil, authority: nil, path: "/x", headerFields: [.userAgent: "Hotwire Native Android"]), body: .init(buffer: ByteBuffer()))
        #expect(Response.afterSubmit(browser, redirectTo: "/posts/1").headers[.location] == "/posts/1")
        #expect(Response.afterSubmit(native, redirectTo: "/posts/1").headers[.location] == "/recede_historical_location")
        #expect(Response.afterSubmit(native, redirectTo: "/posts/1", native: .resume).headers[.location] == "/resume_historical_location")
        #expect(Response.afterSubmit(native, redirectTo: "/", native: .refresh).status == .seeOther)
    }

    @Test func errorPagesAreHTMLThatLoadsTurboWithTheRightStatus() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/no/such/page", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .notFound)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                #expect(response.text.contains("/turbo.min.js"))
                #expect(response.text.contains("Error 404"))
            }
            try await client.execute(uri: "/api/v1/no-such-thing", method: .get) { response in
                #expect(response.status == .notFound)
                #expect(response.json()["error"] is String)
            }
        }
    }

    @Test func oversizedFormsGet413InTheFormatAsked() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let huge = formBody([("email", String(repeating: "a", count: 2_200_000))])
            try await client.execute(uri: "/sign_in", method: .post, headers: formHeaders.merging(browserHeaders), body: huge) { response in
                #expect(response.status == .contentTooLarge)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                #expect(response.text.contains("/turbo.min.js"))
            }
            try await client.execute(uri: "/api/v1/sessions", method: .post, headers: formHeaders, body: huge) { response in
                #expect(response.status == .contentTooLarge)
                #expect(response.json()["error"] is String)
            }
        }
    }

    @Test func layoutCarriesTheCSRFMetaTagWhenSignedIn() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let stored = try await harness.database.read { db in try String.fetchOne(db, sql: "SELECT csrf_token FROM sessions") }
            let shown = try await client.execute(uri: "/", method: .get, headers: cookieHeader(token)) { response in
                try csrfToken(in: response.text)
            }
            #expect(shown == stored)
            try await client.execute(uri: "/", method: .get, headers: browserHeaders) { response in
                #expect(!response.text.contains("csrf-token"))
            }
        }
    }

    @Test func turboScriptURLIsConfigurable() async throws {
        let harness = try await TestHarness { $0.turboScriptURL = "https://cdn.example/turbo@7.1.0.js" }
        try await harness.test { client in
            try await client.execute(uri: "/sign_in", method: .get) { response in
                #expect(response.text.contains(#"<script src="https://cdn.example/turbo@7.1.0.js" defer></script>"#))
            }
        }
    }
}

