import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct CSRFTests {
    @Test func cookieAuthenticatedWriteWithoutTokenIsRejected() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            var headers = cookieHeader(token)
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(uri: "/sign_out", method: .post, headers: headers, body: ByteBuffer()) { response in
                #expect(response.status == .forbidden)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                #expect(response.text.contains("CSRF"))
                #expect(response.text.contains("/turbo.min.js"))
            }
            try await client.execute(
                uri: "/sign_out", method: .post, headers: headers, body: formBody([("authenticity_token", "forged")])
            ) { response in
                #expect(response.status == .forbidden)
            }
            // Nothing happened: the session still works.
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .ok)
            }
            // The cookie on an API write needs the token too, answered in JSON.
            try await client.execute(uri: "/api/v1/sessions/current", method: .delete, headers: [.cookie: "foyer_session=\(token)"]) { response in
                #expect(response.status == .forbidden)
                #expect(response.json()["error"] is String)
            }
        }
    }

    @Test func formFieldOrHeaderCarriesTheToken() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let csrf = try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { try csrfToken(in: $0.text) }
            var headers = cookieHeader(token)
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: "/api/v1/session/cookie", method: .get, headers: headers
            ) { response in
                #expect(response.status == .noContent, "GET needs no CSRF token")
            }
            try await client.execute(
                uri: "/sign_out", method: .post, headers: headers, body: formBody([("authenticity_token", csrf)])
            ) { response in
                #expect(response.status == .seeOther)
            }
        }
    }

    @Test func bearerAuthenticatedAPIWritesAreExempt() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/sessions/current", method: .delete, headers: bearer(token)) { response in
                #expect(response.status == .noContent)
            }
        }
    }
}
