import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct LoginCSRFTests {
    @Test func theSignInFormNeedsTheTokenOfItsOwnPreSessionCookie() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let form = try await signInForm(client)
            let credentials = [("email", TestUser.ada.email), ("password", TestUser.ada.password)]
            let cases: [(String, HTTPFields, [(String, String)])] = [
                ("no token, no cookie", formHeaders, credentials),
                ("the token without its cookie", formHeaders, credentials + [("authenticity_token", form.token)]),
                ("the cookie without the token", form.headers, credentials),
                ("another browser's token", form.headers, credentials + [("authenticity_token", SessionRepository.randomToken())]),
            ]
            for (name, headers, fields) in cases {
                try await client.execute(uri: "/sign_in", method: .post, headers: headers, body: formBody(fields)) { response in
                    #expect(response.status == .forbidden, "\(name)")
                    #expect(response.cookie(named: "foyer_session") == nil, "\(name)")
                    #expect(response.text.contains("did not come from this site"), "\(name)")
                }
            }
            let sessions = try await harness.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM sessions") }
            #expect(sessions == 0)
        }
    }

    @Test func theSignInPageKeepsOneTokenPerBrowser() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let form = try await signInForm(client)
            var headers = browserHeaders
            headers[.cookie] = form.headers[.cookie]
            try await client.execute(uri: "/sign_in", method: .get, headers: headers) { response in
                #expect(response.cookie(named: "foyer_sign_in") == nil)  // the browser has one already
                #expect(response.text.contains(#"name="authenticity_token" value="\#(form.token)""#))
            }
        }
    }

    @Test func crossSiteSignInsAndCookieWritesAreRefusedNativeOnesAreNot() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let json = ByteBuffer(json: #"{"email": "\#(TestUser.ada.email)", "password": "\#(TestUser.ada.password)"}"#)
            let form = formBody([("email", TestUser.ada.email), ("password", TestUser.ada.password)])
            // A page elsewhere posting a form (or text/plain that looks like JSON) to the API sign-in.
            for (headers, body) in [
                (formHeaders.merging([.origin: "https://evil.example"]), form),
                (HTTPFields([.init(name: .contentType, value: "text/plain"), .init(name: .origin, value: "null")]), json),
                (formHeaders.merging([.secFetchSite: "cross-site"]), form),
            ] {
                try await client.execute(uri: "/api/v1/sessions", method: .post, headers: headers, body: body) { response in
                    #expect(response.status == .forbidden)
                    #expect(response.json()["error"] as? String ?? "" != "")
                    #expect(response.headers[.xSessionToken] == nil)
                }
            }
            // Native code and curl: no Origin, no cookie.
            let (token, _) = try await signIn(client)
            // Same origin (the host the browser used, as the load balancer forwards it) is fine.
            try await client.execute(
                uri: "/api/v1/sessions", method: .post,
                headers: jsonHeaders.merging([.origin: "http://foyer.test:8080", .xForwardedHost: "foyer.test:8080"]), body: json
            ) { response in
                #expect(response.status == .created)
            }
            // A cookie-authenticated write from another site: refused before its CSRF token is even looked at.
            let csrf = try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { try csrfToken(in: $0.text) }
            var headers = cookieHeader(token)
            headers[CSRFMiddleware.headerName] = csrf
            headers[.origin] = "https://evil.example"
            try await client.execute(uri: "/sign_out", method: .post, headers: headers) { response in
                #expect(response.status == .forbidden)
                #expect(response.text.contains("another site"))
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .ok)
            }
        }
    }
}

@Suite struct SignInThrottleTests {
    static func attempt(
        _ client: some TestClientProtocol, _ email: String, _ password: String, from ip: String = "203.0.113.7"
    ) async throws -> TestResponse {
        try await client.execute(
            uri: "/api/v1/sessions", method: .post,
            headers: [.contentType: "application/json", .xForwardedFor: ip],
            body: ByteBuffer(json: #"{"email": "\#(email)", "password": "\#(password)"}"#)
        ) { $0 }
    }

    @Test func fiveFailuresLockTheLoginEvenForTheRightPassword() async throws {
        let harness = try await TestHarness { $0.trustProxy = true }
        try await harness.test { client in
            for _ in 0..<5 {
                let status1 = try await Self.attempt(client, TestUser.ada.email, "wrong").status
                #expect(status1 == .unauthorized)
            }
            let locked = try await Self.attempt(client, TestUser.ada.email, TestUser.ada.password)
            #expect(locked.status == .tooManyRequests)
            let retryAfter = try #require(locked.headers[.retryAfter].flatMap(Int.init))
            #expect(retryAfter > 800 && retryAfter <= 900)
            #expect((locked.json()["error"] as? String)?.contains("Too many failed sign-ins") == true)
            // Another account, from the same client, is not affected.
            let status2 = try await Self.attempt(client, TestUser.bob.email, TestUser.bob.password).status
                #expect(status2 == .created)
            // An unknown email is counted and refused exactly the same way.
            for _ in 0..<5 {
                let status3 = try await Self.attempt(client, "nobody@example.com", "wrong", from: "198.51.100.9").status
                #expect(status3 == .unauthorized)
            }
            let status4 = try await Self.attempt(client, "nobody@example.com", "wrong", from: "198.51.100.9").status
                #expect(status4 == .tooManyRequests)
        }
        // The counts are in the database: a restarted server still refuses.
        try await harness.test { client in
            let status5 = try await Self.attempt(client, TestUser.ada.email, TestUser.ada.password, from: "192.0.2.1").status
                #expect(status5 == .tooManyRequests)
        }
    }

    @Test func twentyFailuresFromOneClientLockThatClientOnly() async throws {
        let harness = try await TestHarness { $0.trustProxy = true }
        try await harness.test { client in
            for index in 0..<20 {
                let status6 = try await Self.attempt(client, "guess\(index)@example.com", "wrong").status
                #expect(status6 == .unauthorized)
            }
            let status7 = try await Self.attempt(client, TestUser.ada.email, TestUser.ada.password).status
                #expect(status7 == .tooManyRequests)
            let status8 = try await Self.attempt(client, TestUser.ada.email, TestUser.ada.password, from: "203.0.113.8").status
                #expect(status8 == .created)
        }
    }

    @Test func theFormAnswers429WithTheSignInPage() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let form = try await signInForm(client)
            for expected in Array(repeating: HTTPResponse.Status.unprocessableContent, count: 5) + [.tooManyRequests] {
                try await client.execute(
                    uri: "/sign_in", method: .post, headers: form.headers,
                    body: formBody([("authenticity_token", form.token), ("email", TestUser.ada.email), ("password", "wrong")])
                ) { response in
                    #expect(response.status == expected)
                    if expected == .tooManyRequests {
                        #expect(response.headers[.retryAfter] != nil)
                        #expect(response.text.contains("Too many failed sign-ins"))
                        #expect(response.text.contains(#"<form action="/sign_in""#))
                    }
                }
            }
        }
    }

    @Test func failuresOutsideTheWindowNoLongerCountAndArePruned() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let throttle = SignInThrottle(database: database)
        let longAgo = Date().addingTimeInterval(-SignInThrottle.window - 60)
        for _ in 0..<5 { _ = try await throttle.begin(login: "ada@example.com", clientIP: nil, now: longAgo) }
        let attempt = try await throttle.begin(login: "ada@example.com", clientIP: nil)
        try await throttle.succeeded(attempt, login: "ada@example.com")
        try await throttle.prune()
        #expect(try await database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM sign_in_failures") } == 0)
    }

    @Test func guessesSentAtOnceMeetTheLimitLikeGuessesInARow() async throws {
        let harness = try await TestHarness { $0.trustProxy = true }
        try await harness.test { client in
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for index in 0..<12 {
                    group.addTask { try await Self.attempt(client, TestUser.ada.email, "guess \(index)").status }
                }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .unauthorized }.count == 5)
            #expect(statuses.filter { $0 == .tooManyRequests }.count == 7)
        }
    }
}

@Suite struct SessionLifetimeTests {
    @Test func idleAndOldSessionsAreOverAndPruned() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let user = try await UserRepository(database: database, passwordHashCost: 4).create(email: "ada@example.com", password: "long enough")
        let store = SessionRepository(database: database, lifetime: SessionLifetime(idleTimeout: 3600, lifetime: 86_400))
        let (_, token) = try await store.create(for: user, userAgent: nil, ipAddress: nil)
        let now = Date()
        #expect(try await store.find(token: token, now: now) != nil)
        #expect(try await store.find(token: token, now: now.addingTimeInterval(3000)) != nil)  // used: idle time starts over
        #expect(try await store.find(token: token, now: now.addingTimeInterval(3000 + 3601)) == nil)  // idle too long
        // Used every half hour, it still ends a day after sign-in.
        var when = now
        while when.timeIntervalSince(now) < 86_000 {
            when.addTimeInterval(1800)
            _ = try await store.find(token: token, now: when)
        }
        #expect(try await store.find(token: token, now: now.addingTimeInterval(86_401)) == nil)
        #expect(try await store.prune(now: now.addingTimeInterval(86_401)) == 1)
    }

    @Test func useServedFromTheCacheStillKeepsASessionFromIdling() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let user = try await UserRepository(database: database, passwordHashCost: 4).create(email: "ada@example.com", password: "long enough")
        let store = SessionRepository(database: database, lifetime: SessionLifetime(idleTimeout: 10, lifetime: 86_400))
        let (_, token) = try await store.create(for: user, userAgent: nil, ipAddress: nil)
        let now = Date()
        for second in [0.5, 5, 9, 14, 19] {  // never 10 s apart, though 18.5 s after the first use
            #expect(try await store.find(token: token, now: now.addingTimeInterval(second)) != nil, "at \(second) s")
        }
        #expect(try await store.find(token: token, now: now.addingTimeInterval(30)) == nil)
    }

    @Test func theCookieLivesAsLongAsTheSessionCan() async throws {
        let harness = try await TestHarness { $0.sessionLifetime = SessionLifetime(idleTimeout: 600, lifetime: 7200) }
        try await harness.test { client in
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                body: ByteBuffer(json: #"{"email": "\#(TestUser.ada.email)", "password": "\#(TestUser.ada.password)"}"#)
            ) { response in
                #expect(response.cookie(named: "foyer_session")?.contains("Max-Age=7200") == true)
            }
        }
    }
}

@Suite struct SecurityHeaderTests {
    @Test func pagesCarryAPolicyAndEveryAnswerNosniff() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for uri in ["/", "/sign_in", "/no/such/page"] {
                try await client.execute(uri: uri, method: .get, headers: browserHeaders) { response in
                    let policy = try #require(response.headers[.contentSecurityPolicy], "\(uri)")
                    #expect(policy.contains("script-src 'self'") && !policy.contains("unsafe-eval"))
                    #expect(policy.contains("frame-ancestors 'self'"))
                    #expect(response.headers[.xContentTypeOptions] == "nosniff")
                    #expect(response.headers[.referrerPolicy] == "strict-origin-when-cross-origin")
                    #expect(response.headers[.strictTransportSecurity] == nil)
                }
            }
            for uri in ["/api/v1/posts", "/foyer.css", "/up"] {
                try await client.execute(uri: uri, method: .get) { response in
                    #expect(response.headers[.xContentTypeOptions] == "nosniff", "\(uri)")
                    #expect(response.headers[.contentSecurityPolicy] == nil, "\(uri)")
                }
            }
            try await client.execute(uri: "/up", method: .get, headers: [.xForwardedProto: "https"]) { response in
                #expect(response.headers[.strictTransportSecurity]?.hasPrefix("max-age=") == true)
            }
        }
    }
}

@Suite struct MethodNotAllowedTests {
    @Test func aKnownPathWithAnUnknownMethodIs405WithAllow() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/api/v1/me/export", method: .delete) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "GET, HEAD")
                #expect((response.json()["error"] as? String)?.contains("GET") == true)
            }
            try await client.execute(uri: "/api/v1/posts/42", method: .post) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow]?.contains("PATCH") == true && response.headers[.allow]?.contains("DELETE") == true)
            }
            // A path a route names word for word is that route's, not also a parameter's beside it.
            try await client.execute(uri: "/api/v1/passkeys/authentication_options", method: .options) { response in
                #expect(response.status == .methodNotAllowed && response.headers[.allow] == "POST")
            }
            try await client.execute(uri: "/api/v1/passkeys/some-id", method: .post) { response in
                #expect(response.headers[.allow] == "DELETE, PATCH")
            }
            try await client.execute(uri: "/up", method: .put, headers: browserHeaders) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
            }
            try await client.execute(uri: "/no/such/thing", method: .delete) { response in
                #expect(response.status == .notFound)
            }
        }
    }
}

@Suite struct MobileServicesAlwaysTests {
    @Test func withoutAFileTheEmbeddedServiceIsDescribed() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/mobile-services.json", method: .get, headers: [:]) { response in
                #expect(response.status == .ok)
                let services = try #require(response.json()["services"] as? [[String: Any]])
                let syncApp = try #require(services.first { $0["type"] as? String == "sync-app" })
                #expect(syncApp["url"] as? String == "http://localhost/graphql")
                #expect((syncApp["config"] as? [String: Any])?["websocketUrl"] as? String == "ws://localhost/graphql")
                #expect(!services.contains { $0["type"] as? String == "keycloak" })
            }
        }
    }

    @Test func keycloakFromFlagsIsAddedWithoutItsSecret() async throws {
        let harness = try await TestHarness {
            $0.keycloakURL = "http://127.0.0.1:1"
            $0.keycloakRealm = "showcase"
            $0.keycloakClientID = "foyer"
            $0.keycloakClientSecret = "do-not-leak"
        }
        try await harness.test { client in
            try await client.execute(uri: "/mobile-services.json", method: .get, headers: [:]) { response in
                #expect(response.status == .ok)
                #expect(!response.text.contains("do-not-leak"))
                let services = try #require(response.json()["services"] as? [[String: Any]])
                let keycloak = try #require(services.first { $0["type"] as? String == "keycloak" })
                let config = try #require(keycloak["config"] as? [String: Any])
                #expect(config["realm"] as? String == "showcase" && config["resource"] as? String == "foyer")
                #expect(config["auth-server-url"] as? String == "http://localhost")
            }
        }
    }
}
