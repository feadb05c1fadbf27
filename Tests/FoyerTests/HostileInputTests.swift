import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// A JWT's three parts from the JSON of its header and claims; not signed unless `signature` pretends to be.
func jwtShaped(_ header: String, _ claims: String, signature: String = "") -> String {
    [header, claims].map { Data($0.utf8).base64URLEncoded }.joined(separator: ".") + "." + signature
}

/// Hostile input of every kind Foyer meets, each answered with its own clear 4xx, and nothing stored by any of it.
@Suite struct HostileInputTests {
    struct Case {
        let name: String
        let uri: String
        var method: HTTPRequest.Method = .post
        var headers: HTTPFields = [:]
        var body: ByteBuffer? = nil
        let expected: HTTPResponse.Status
        /// Said in the answer, so a person can tell what was wrong.
        var says: String? = nil
    }

    @Test func everyClassOfHostileInputGetsAClear4xxAndChangesNothing() async throws {
        let harness = try await TestHarness { $0.trustProxy = true }
        try await harness.test { client in
            let (token, session) = try await signIn(client)
            let (revoked, revokedSession) = try await signIn(client, userAgent: "Revoked")
            try await client.execute(uri: "/api/v1/sessions/\(revokedSession["id"] as! String)", method: .delete, headers: bearer(token)) {
                #expect($0.status == .noContent)
            }
            let browser = try await browserSession(client)
            let form = try await signInForm(client)
            let sql = "'; DROP TABLE posts; --"
            let postJSON = bearer(token).merging(jsonHeaders)
            let now = Int(Date().timeIntervalSince1970)
            let cases: [Case] = [
                Case(name: "oversized body", uri: "/api/v1/posts", headers: postJSON,
                     body: ByteBuffer(repeating: UInt8(ascii: "a"), count: Request.maximumBodySize + 1), expected: .contentTooLarge),
                Case(name: "broken JSON", uri: "/api/v1/posts", headers: postJSON, body: ByteBuffer(string: #"{"title": "unfinished"#),
                     expected: .badRequest, says: "not valid JSON"),
                Case(name: "wrong content type", uri: "/api/v1/posts", headers: bearer(token).merging([.contentType: "text/csv"]),
                     body: ByteBuffer(string: "title,content\nA,B"), expected: .badRequest, says: "JSON"),
                Case(name: "JSON of the wrong shape", uri: "/api/v1/posts", headers: postJSON, body: ByteBuffer(string: #"{"title": 42}"#),
                     expected: .unprocessableContent, says: "must be a string"),
                Case(name: "missing CSRF token", uri: "/posts", headers: browser.headers,
                     body: formBody([("post[title]", "No token"), ("post[content]", "x")]), expected: .forbidden, says: "CSRF"),
                Case(name: "cross-site Origin", uri: "/posts", headers: browser.headers.merging([.origin: "https://evil.example"]),
                     body: formBody([("authenticity_token", browser.csrf), ("post[title]", "Cross-site"), ("post[content]", "x")]),
                     expected: .forbidden, says: "another site"),
                Case(name: "sign-in form without its token (login CSRF)", uri: "/sign_in", headers: formHeaders,
                     body: formBody([("email", TestUser.ada.email), ("password", TestUser.ada.password)]), expected: .forbidden),
                Case(name: "path traversal in static files", uri: "/../Package.swift", method: .get, expected: .badRequest),
                Case(name: "encoded path traversal in static files", uri: "/%2e%2e/%2e%2e/etc/passwd", method: .get, expected: .badRequest),
                Case(name: "SQL metacharacters in a sign-in", uri: "/api/v1/sessions", headers: jsonHeaders,
                     body: ByteBuffer(string: #"{"email": "' OR '1'='1' --", "password": "' OR '1'='1"}"#), expected: .unauthorized),
                Case(name: "alg none JWT", uri: "/api/v1/posts", headers: bearer(jwtShaped(#"{"alg":"none"}"#, #"{"sub":"1","exp":\#(now + 600)}"#)).merging(jsonHeaders),
                     body: ByteBuffer(string: #"{"title": "forged"}"#), expected: .unauthorized),
                Case(name: "expired JWT", uri: "/api/v1/me", method: .get,
                     headers: bearer(jwtShaped(#"{"alg":"RS256","kid":"k"}"#, #"{"sub":"1","exp":\#(now - 600)}"#, signature: "c2ln")), expected: .unauthorized),
                Case(name: "replayed revoked token", uri: "/api/v1/posts", headers: bearer(revoked).merging(jsonHeaders),
                     body: ByteBuffer(string: #"{"title": "from a revoked session"}"#), expected: .unauthorized),
                Case(name: "unknown method on a known path", uri: "/api/v1/me/export", method: .patch, headers: bearer(token), expected: .methodNotAllowed),
            ]
            let postsBefore = try await harness.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM posts") }
            let sessionsBefore = try await harness.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM sessions") }
            for hostile in cases {
                try await client.execute(uri: hostile.uri, method: hostile.method, headers: hostile.headers, body: hostile.body) { response in
                    #expect(response.status == hostile.expected, "\(hostile.name): \(response.text.prefix(300))")
                    if let says = hostile.says { #expect(response.text.contains(says), "\(hostile.name): \(response.text.prefix(300))") }
                }
            }

            // SQL metacharacters in every text field are stored as text, and the table is still there.
            let id = try await createPost(client, token: token, title: sql, content: sql + " \"; DELETE FROM users; --")
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { response in
                #expect(response.json()["title"] as? String == sql)
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer(token)) { #expect($0.status == .noContent) }

            // Open redirect and header injection in return_to: the browser stays on Foyer, on one line.
            for returnTo in ["https://evil.example/", "//evil.example", "/account\r\nSet-Cookie: stolen=1", "/\\evil.example"] {
                try await client.execute(
                    uri: "/sign_in", method: .post, headers: form.headers,
                    body: formBody([("authenticity_token", form.token), ("email", TestUser.ada.email), ("password", TestUser.ada.password), ("return_to", returnTo)])
                ) { response in
                    #expect(response.status == .seeOther)
                    let location = try #require(response.headers[.location])
                    #expect(location.hasPrefix("/") && !location.hasPrefix("//") && !location.contains("\r") && !location.contains("\n"), "\(returnTo)")
                    #expect(response.cookie(named: "stolen") == nil)
                }
            }

            // Brute force: the sixth wrong password in a row is a 429, and no session comes of it.
            for attempt in 1...6 {
                try await client.execute(
                    uri: "/api/v1/sessions", method: .post, headers: jsonHeaders.merging([.xForwardedFor: "198.51.100.1"]),
                    body: ByteBuffer(string: #"{"email": "\#(TestUser.bob.email)", "password": "guess \#(attempt)"}"#)
                ) { response in
                    #expect(response.status == (attempt <= 5 ? .unauthorized : .tooManyRequests))
                }
            }

            let postsAfter = try await harness.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM posts") }
            let sessionsAfter = try await harness.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM sessions") }
            #expect(postsAfter == postsBefore)
            #expect(sessionsAfter == (sessionsBefore ?? 0) + 4)  // the four return_to sign-ins above, nothing else
            _ = session
        }
    }
}

@Suite struct BackChannelLogoutStorageTests {
    /// A token as the token endpoint hands it over: only its payload is read when keeping it.
    func token(_ claims: String) -> String { jwtShaped(#"{"alg":"RS256"}"#, claims, signature: "c2ln") }

    @Test func aLogoutEndsTheSessionsOfItsKeycloakSessionOrElseOfItsSubject() async throws {
        var config = FoyerConfig()
        config.keycloakURL = "http://127.0.0.1:1"
        config.keycloakRealm = "showcase"
        config.keycloakClientID = "foyer"
        let settings = try #require(try KeycloakSettings(config: config, mobileServices: nil))
        let http = ProviderClient.makeHTTPClient()
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let store = SessionRepository(database: database)
        let keycloak = ProviderSessions(
            client: ProviderClient(settings: settings.provider, http: http, metrics: FoyerMetrics()), store: .sqlite(database), sessions: store,
            trustProxy: false, linkVerifiedEmail: false, logger: .init(label: "test")
        )
        let ada = try await keycloak.user(for: ["sub": "ada-sub", "email": "ada@example.org"])
        var opened: [(sid: String, token: String)] = []
        for sid in ["realm-session-1", "realm-session-1", "realm-session-2"] {
            let (session, token) = try await store.create(for: ada, userAgent: nil, ipAddress: nil)
            try await keycloak.keep(
                ProviderTokenSet(accessToken: self.token(#"{"sub":"ada-sub"}"#), expiresIn: 300, refreshToken: nil,
                                 idToken: self.token(#"{"sub":"ada-sub","sid":"\#(sid)"}"#)),
                forSession: session.id
            )
            opened.append((sid, token))
        }
        #expect(try await keycloak.endSessions(providerSession: "realm-session-1", subject: "ada-sub") == 2)
        #expect(try await store.find(token: opened[0].token) == nil)
        #expect(try await store.find(token: opened[1].token) == nil)
        #expect(try await store.find(token: opened[2].token) != nil)
        // Another subject's sid is not ada's to end.
        #expect(try await keycloak.endSessions(providerSession: "realm-session-2", subject: "someone-else") == 0)
        // No sid: every session of the subject.
        #expect(try await keycloak.endSessions(providerSession: nil, subject: "ada-sub") == 1)
        #expect(try await store.find(token: opened[2].token) == nil)
        try await http.shutdown()
    }
}
