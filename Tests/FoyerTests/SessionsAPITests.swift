import Crypto
import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct SessionsAPITests {
    /// The calendar by arithmetic agrees with the C library's on every day from 1600 to 2600, at both ends of each
    /// day (and a second either side of midnight).
    @Test func utcTimeIsWhatGmtimeSays() {
        for days in stride(from: -135_140, through: 230_100, by: 1) {
            for secondOfDay in [0, 1, 43_200, 86_399] {
                var whole = time_t(days * 86_400 + secondOfDay)
                var parts = tm()
                gmtime_r(&whole, &parts)
                let expected = UTCTime(
                    year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday),
                    hour: Int(parts.tm_hour), minute: Int(parts.tm_min), second: Int(parts.tm_sec)
                )
                let made = UTCTime(Date(timeIntervalSince1970: TimeInterval(whole)))
                if made != expected {
                    Issue.record("\(whole): \(made), gmtime says \(expected)")
                    return
                }
            }
        }
        #expect(UTCTime(Date(timeIntervalSince1970: -0.5)) == UTCTime(year: 1969, month: 12, day: 31, hour: 23, minute: 59, second: 59))
    }

    /// `GET /api/v1/me` writes its JSON by hand: the same bytes as the API's encoder, for every kind of field (absent
    /// ones as null, a role, dates before 1970 and with fractions of a second, text that needs escaping).
    @Test func theHandWrittenMeIsWhatTheEncoderWrites() throws {
        var full = User(
            id: 42, email: "ada@example.com", name: "Ada \"the\" Countess\\ of Lovelace\n\r\u{1}\u{8}\u{c}\u{1f}\u{7f}\t é 数 👩🏽‍💻 / </script>", passwordHash: "",
            createdAt: Date(timeIntervalSince1970: 1_800_000_000.999), emailConfirmedAt: Date(), termsAcceptedAt: Date(timeIntervalSince1970: -86_400.25)
        )
        full.role = .admin
        full.locale = "pt-BR"
        let bare = User(id: 7, email: "b@example.com", name: "B", passwordHash: "", createdAt: Date(timeIntervalSince1970: 0))
        for (user, provider) in [(full, "keycloak/realm"), (bare, nil)] {
            let me = SessionsAPIController.Me(user, provider: provider)
            let written = String(buffer: me.json)
            let encoded = String(buffer: Response.encodeJSON(me))
            #expect(written == encoded)
        }
    }

    @Test func signInAnswers201WithTokenHeaderAndPersistentCookie() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: [.contentType: "application/json", .userAgent: "Hotwire Native iOS"],
                body: ByteBuffer(json: #"{"email": "ADA@example.com ", "password": "correct horse battery"}"#)
            ) { response in
                #expect(response.status == .created)
                #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
                let token = try #require(response.headers[.xSessionToken])
                #expect(token.count >= 43)
                let cookie = try #require(response.cookie(named: "foyer_session"))
                #expect(cookie.hasPrefix("foyer_session=\(token);"))
                for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age="] {
                    #expect(cookie.contains(attribute), "cookie lacks \(attribute): \(cookie)")
                }
                #expect(!cookie.contains("Secure"))
                let body = response.json()
                #expect(body["id"] is String)
                #expect(body["user_agent"] as? String == "Hotwire Native iOS")
                #expect(body["created_at"] is String)
                #expect(body.keys.contains("ip_address"))
                let user = try #require(body["user"] as? [String: Any])
                #expect(user["email"] as? String == "ada@example.com")
                #expect(user["id"] is Int)
                #expect(user["password_hash"] == nil)
            }
        }
    }

    @Test func storesOnlyTheHashOfTheToken() async throws {
        let harness = try await TestHarness()
        let token = try await harness.test { client in try await signIn(client).token }
        let stored = try await harness.database.read { db in try String.fetchAll(db, sql: "SELECT token_hash FROM sessions") }
        let expected = SHA256.hash(data: Data(token.utf8)).map { String(format: "%02x", $0) }.joined()
        #expect(stored == [expected])
        #expect(!stored.contains(token))
    }

    @Test func formBodyAndDotJSONPathAlsoSignIn() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(
                uri: "/api/v1/sessions.json", method: .post, headers: formHeaders,
                body: formBody([("email", TestUser.bob.email), ("password", TestUser.bob.password)])
            ) { response in
                #expect(response.status == .created)
                #expect(response.headers[.xSessionToken] != nil)
            }
            // Rails clients nest the fields under `session` or `user`.
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                body: ByteBuffer(json: #"{"user": {"email": "bob@example.com", "password": "staple of bob's"}}"#)
            ) { response in
                #expect(response.status == .created)
            }
        }
    }

    @Test func wrongPasswordAndUnknownEmailGetTheSame401() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for email in ["ada@example.com", "nobody@example.com"] {
                try await client.execute(
                    uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                    body: ByteBuffer(json: #"{"email": "\#(email)", "password": "wrong password"}"#)
                ) { response in
                    #expect(response.status == .unauthorized)
                    #expect(response.json()["error"] as? String == "That email or password is incorrect")
                    #expect(response.headers[.xSessionToken] == nil)
                    #expect(response.setCookies.isEmpty)
                }
            }
        }
    }

    @Test func malformedMissingAndOversizedBodiesAreClearErrors() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders, body: ByteBuffer(json: #"{"email": "#)
            ) { response in
                #expect(response.status == .badRequest)
                #expect((response.json()["error"] as? String)?.contains("not valid JSON") == true)
            }
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders, body: ByteBuffer(json: #"{"email": "ada@example.com"}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect((response.json()["error"] as? String)?.contains("password") == true)
            }
            let huge = String(repeating: "a", count: 100_000)
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                body: ByteBuffer(json: #"{"email": "\#(huge)", "password": "x"}"#)
            ) { response in
                #expect(response.status == .contentTooLarge)
                #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
            }
        }
    }

    @Test func bearerAndTokenSchemesAuthenticate() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            for authorization in ["Bearer \(token)", "Token \(token)", #"Token token="\#(token)""#] {
                try await client.execute(uri: "/api/v1/me", method: .get, headers: [.authorization: authorization]) { response in
                    #expect(response.status == .ok, "\(authorization)")
                    #expect(response.json()["email"] as? String == "ada@example.com")
                }
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer("not-a-token")) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test func unauthenticatedJSONGets401WithWWWAuthenticate() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/api/v1/me", method: .get) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate] == "Bearer")
                #expect(response.json()["error"] is String)
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func revokingTheCurrentSessionStopsItsTokenAndExpiresTheCookie(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/sessions/current", method: .delete, headers: bearer(token)) { response in
                #expect(response.status == .noContent)
                let cookie = try #require(response.cookie(named: "foyer_session"))
                #expect(cookie.contains("Max-Age=0"))
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .unauthorized)
            }
            try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func listsAndRevokesOwnSessionsById(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (phone, phoneSession) = try await signIn(client, userAgent: "Phone")
            let (laptop, _) = try await signIn(client, userAgent: "Laptop")
            let (bobToken, bobSession) = try await signIn(client, as: .bob)
            let sessions = try await client.execute(uri: "/api/v1/sessions", method: .get, headers: bearer(laptop)) { response in
                #expect(response.status == .ok)
                return try #require(try JSONSerialization.jsonObject(with: Data(response.text.utf8)) as? [[String: Any]])
            }
            #expect(Set(sessions.compactMap { $0["user_agent"] as? String }) == ["Phone", "Laptop"])
            #expect(sessions.filter { $0["current"] as? Bool == true }.map { $0["user_agent"] as? String } == ["Laptop"])

            // Someone else's session id is not found, and stays alive.
            let bobID = try #require(bobSession["id"] as? String)
            try await client.execute(uri: "/api/v1/sessions/\(bobID)", method: .delete, headers: bearer(laptop)) { response in
                #expect(response.status == .notFound)
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(bobToken)) { response in
                #expect(response.status == .ok)
            }

            let phoneID = try #require(phoneSession["id"] as? String)
            try await client.execute(uri: "/api/v1/sessions/\(phoneID)", method: .delete, headers: bearer(laptop)) { response in
                #expect(response.status == .noContent)
                #expect(response.setCookies.isEmpty, "revoking another device must not sign this one out")
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(phone)) { response in
                #expect(response.status == .unauthorized)
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(laptop)) { response in
                #expect(response.status == .ok)
            }
        }
    }

    @Test func bearerTokenHandsOverToAWebViewCookie() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/session/cookie", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .noContent)
                let cookie = try #require(response.cookie(named: "foyer_session"))
                #expect(cookie.hasPrefix("foyer_session=\(token);"))
            }
            try await client.execute(uri: "/api/v1/session/cookie?return_to=/account", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/account")
            }
            try await client.execute(uri: "/api/v1/session/cookie?return_to=https://evil.example/", method: .get, headers: bearer(token)) { response in
                #expect(response.headers[.location] == "/")
            }
            try await client.execute(uri: "/api/v1/session/cookie", method: .get) { response in
                #expect(response.status == .unauthorized)
            }
            // The cookie now works on an HTML page.
            try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains("ada@example.com"))
            }
        }
    }

    @Test func secureCookieBehindHTTPSOrWhenConfigured() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(
                uri: "/api/v1/sessions", method: .post,
                headers: [.contentType: "application/json", HTTPField.Name("X-Forwarded-Proto")!: "https"],
                body: ByteBuffer(json: #"{"email": "ada@example.com", "password": "correct horse battery"}"#)
            ) { response in
                #expect(response.cookie(named: "foyer_session")?.contains("Secure") == true)
            }
        }
        let configured = try await TestHarness { $0.secureCookies = true }
        try await configured.test { client in
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                body: ByteBuffer(json: #"{"email": "ada@example.com", "password": "correct horse battery"}"#)
            ) { response in
                #expect(response.cookie(named: "foyer_session")?.contains("Secure") == true)
            }
        }
    }
}
