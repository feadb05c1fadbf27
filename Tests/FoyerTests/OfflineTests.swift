import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct OfflineRulesTests {
    static let shipped = { try! PathConfiguration(contentsOf: packageRoot + "/path_configuration.json").offline }()

    @Test func shippedRulesKeepWhatAPersonReadsAndNothingOfAccountsSignInOrStreams() {
        let rules = Self.shipped
        for path in ["/tasks", "/tasks?page=2", "/tasks/7", "/tasks/new", "/tasks/7/edit", "/posts", "/posts/3", "/posts/new", "/posts/3/edit"] {
            #expect(rules.strategy(for: path) == .networkFirst, "\(path)")
        }
        #expect(rules.strategy(for: "/") == .staleWhileRevalidate)
        for path in ["/foyer.css", "/live.js", "/offline.js", "/turbo.min.js"] {
            #expect(rules.strategy(for: path) == .cacheFirst, "\(path)")
        }
        for path in ["/sign_in", "/account", "/api/v1/posts", "/graphql", "/streams/dGFza3M--abc", "/tasks.json", "/posts.json", "/offline"] {
            #expect(rules.strategy(for: path) ?? OfflineRules.Strategy.none == OfflineRules.Strategy.none, "\(path)")
        }
        for path in ["/tasks", "/tasks/7", "/tasks/7/status", "/posts"] {
            #expect(rules.queuesWrites(to: path), "\(path)")
        }
        for path in ["/sign_in", "/sign_out", "/api/v1/posts", "/tasks/7/status/x", "/account/other_sessions"] {
            #expect(!rules.queuesWrites(to: path), "\(path)")
        }
        #expect(rules.maxEntries == 100 && rules.maxAge == 604_800)
    }

    static let androidCatchAll = #""platforms": {"android": {"rules_before": [{"patterns": [".*"], "properties": {"uri": "hotwire://fragment/web"}}]}}"#

    @Test func offlinePropertiesThatMeanNothingStopStartUp() {
        let cases: [(String, String)] = [
            (#"{"rules": [{"patterns": ["/x"], "properties": {"offline": "forever"}}]}"#, "rules[0].properties.offline must be one of network-first, cache-first"),
            (#"{"rules": [{"patterns": ["/x"], "properties": {"offline_writes": "later"}}]}"#, #"offline_writes can only be "queue""#),
            (#"{"settings": {"offline_max_entries": 0}, "rules": []}"#, "settings.offline_max_entries must be a positive whole number"),
            (#"{"settings": {"offline_max_age": "1d"}, "rules": []}"#, "settings.offline_max_age must be a positive whole number"),
            (#"{"rules": [{"patterns": [".*"], "properties": {"offline": "network-first"}}]}"#, "a rule keeps /graphql offline (network-first)"),
            (#"{"rules": [{"patterns": ["^/streams/"], "properties": {"offline": "cache-first"}}]}"#, "a rule keeps /streams/tasks offline"),
        ]
        PathConfigurationTests.expectRefused(cases)
    }

    @Test func aLaterRuleWinsAsInNativeShells() throws {
        let json = """
            {"rules": [{"patterns": [".*"], "properties": {"offline": "network-first"}},
                       {"patterns": ["^/(graphql|streams/|service-worker)"], "properties": {"offline": "none"}}],
             \(Self.androidCatchAll)}
            """
        let rules = try PathConfiguration(data: Data(json.utf8)).offline
        #expect(rules.strategy(for: "/anything") == .networkFirst)
        #expect(rules.strategy(for: "/graphql") == OfflineRules.Strategy.none)
        #expect(rules.maxEntries == OfflineRules.standardMaxEntries)
    }
}

@Suite struct OfflineRoutesTests {
    func worker(_ client: some TestClientProtocol) async throws -> (String, String) {
        try await client.execute(uri: "/service-worker.js", method: .get) { response in
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "text/javascript; charset=utf-8")
            #expect(response.headers[.cacheControl] == "no-cache")
            return (response.text, try #require(response.headers[.eTag]))
        }
    }

    /// The first line the server writes before Public/foyer-worker.js.
    func settings(of worker: String) throws -> [String: Any] {
        let line = try #require(worker.split(separator: "\n").first)
        let json = try #require(line.split(separator: "=", maxSplits: 1).last)
        return try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test func theWorkerCarriesTheRulesWhatToPrecacheAndAVersionThatChangesWithThem() async throws {
        let (source, etag) = try await TestHarness().test { client in
            let (source, etag) = try await worker(client)
            try await client.execute(uri: "/service-worker.js", method: .get, headers: [.ifNoneMatch: etag]) { response in
                #expect(response.status == .notModified)
            }
            return (source, etag)
        }
        let on = try settings(of: source)
        #expect(on["enabled"] as? Bool == true)
        #expect(on["precache"] as? [String] == ["/offline", "/foyer.css", "/live.js", "/picture-input.js", "/passkeys.js", "/offline.js", "/turbo.min.js"])
        #expect((on["rules"] as? [[String: Any]])?.isEmpty == false)
        #expect(etag == "\"\(on["version"] as? String ?? "")\"")
        #expect(source.contains(#"self.addEventListener("fetch""#))

        let off = try settings(of: try await TestHarness { $0.offline = false }.test { client in try await worker(client).0 })
        #expect(off["enabled"] as? Bool == false)
        #expect(off["version"] as? String != on["version"] as? String)
    }

    @Test func theOfflinePageIsTheSameForEveryoneAndHoldsNoAccount() async throws {
        try await TestHarness().test { client in
            let (token, _) = try await signIn(client)
            for headers in [browserHeaders, cookieHeader(token)] {
                try await client.execute(uri: "/offline", method: .get, headers: headers) { response in
                    #expect(response.status == .ok)
                    #expect(response.text.contains("<h1>You are offline</h1>"))
                    #expect(!response.text.contains("csrf-token"))
                    #expect(!response.text.contains(TestUser.ada.email))
                    #expect(response.headers[.offlineOwner] == nil)
                }
            }
        }
    }

    @Test func pagesSayWhoseTheyAreAndLoadTheOfflineScript() async throws {
        try await TestHarness().test { client in
            let ada = try await signIn(client).token
            let bob = try await signIn(client, as: .bob).token
            func owner(_ headers: HTTPFields) async throws -> String? {
                try await client.execute(uri: "/posts", method: .get, headers: headers) { response in
                    #expect(response.text.contains(#"<script src="/offline.js" defer></script>"#))
                    return response.headers[.offlineOwner]
                }
            }
            #expect(try await owner(browserHeaders) == "public")
            let adas = try #require(try await owner(cookieHeader(ada)))
            #expect(adas.count == 24 && adas != "public")
            #expect(try await owner(cookieHeader(ada)) == adas)
            #expect(try await owner(cookieHeader(bob)) != adas)
        }
        try await TestHarness { $0.offline = false }.test { client in
            try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { response in
                #expect(!response.text.contains("/offline.js"))
                #expect(response.headers[.offlineOwner] == nil)
            }
        }
    }

    @Test func aPageRenderedForANativeShellStaysNativeForItsWorkersRequests() async throws {
        try await TestHarness().test { client in
            for (cookie, native) in [("native_shell=1", true), ("native_shell=0", false), ("other=1", false)] {
                var headers = browserHeaders
                headers[.cookie] = cookie
                try await client.execute(uri: "/posts", method: .get, headers: headers) { response in
                    #expect(response.text.contains(#"<body class="native">"#) == native, "\(cookie)")
                }
            }
        }
    }

    @Test func aKeyStillInUseSaysWhenToSendAgainUnlikeAConflictOfVersions() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, session) = try await signIn(client)
            let user = try #require((session["user"] as? [String: Any])?["id"] as? Int)
            let body = ByteBuffer(string: #"{"title": "Held", "content": "The first is still running."}"#)
            let request = Request(
                head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/api/v1/posts", headerFields: [.contentType: "application/json"]),
                body: .init(buffer: body)
            )
            let keys = IdempotencyKeys(store: harness.store)
            #expect(try await keys.storage.claim(caller: Int64(user), key: "held", fingerprint: IdempotencyKeys.fingerprint(request, body: body), now: Date()) == .claimed)
            var headers = bearer(token)
            headers[.contentType] = "application/json"
            headers[.idempotencyKey] = "held"
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: headers, body: body) { response in
                #expect(response.status == .conflict)
                #expect(response.headers[.retryAfter] == "1")
            }
        }
    }
}
