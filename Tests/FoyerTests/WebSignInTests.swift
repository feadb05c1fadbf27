import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct WebSignInTests {
    @Test func protectedPageAnswers401WithTheSignInFormNotARedirect() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/account?tab=devices", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.location] == nil)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                #expect(response.text.contains(#"<form action="/sign_in" method="post""#))
                #expect(response.text.contains(#"name="return_to" value="/account?tab=devices""#))
                #expect(response.text.contains("/turbo.min.js"))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func signInFormRedirects303ToThePageFirstAskedFor(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            try await client.execute(uri: "/sign_in", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#"name="password""#))
            }
            let form = try await signInForm(client)
            let token = try await client.execute(
                uri: "/sign_in", method: .post, headers: form.headers,
                body: formBody([("authenticity_token", form.token), ("email", TestUser.ada.email), ("password", TestUser.ada.password), ("return_to", "/account")])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/account")
                let cookie = try #require(response.cookie(named: "foyer_session"))
                return String(cookie.dropFirst("foyer_session=".count).prefix { $0 != ";" })
            }
            try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains("ada@example.com"))
            }
        }
    }

    @Test func returnPathStaysOnThisHost() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let cases: [(String, String)] = [
                ("//evil.example/steal", "/"),
                ("https://evil.example/steal", "/"),
                ("javascript:alert(1)", "/"),
                ("/\\evil.example", "/"),
                ("/sign_in", "/"),
                ("/account?x=1", "/account?x=1"),
            ]
            let form = try await signInForm(client)
            for (returnTo, expected) in cases {
                try await client.execute(
                    uri: "/sign_in", method: .post, headers: form.headers,
                    body: formBody([("authenticity_token", form.token), ("email", TestUser.ada.email), ("password", TestUser.ada.password), ("return_to", returnTo)])
                ) { response in
                    #expect(response.status == .seeOther)
                    #expect(response.headers[.location] == expected, "return_to \(returnTo)")
                }
            }
        }
    }

    @Test func absoluteReturnURLIsAcceptedOnlyForThisHost() {
        func request(authority: String) -> Request {
            Request(head: HTTPRequest(method: .post, scheme: "http", authority: authority, path: "/sign_in"), body: .init(buffer: ByteBuffer()))
        }
        #expect(ReturnPath.safe("http://foyer.test:8080/account?a=1", request: request(authority: "foyer.test:8080")) == "/account?a=1")
        #expect(ReturnPath.safe("http://other.test/account", request: request(authority: "foyer.test")) == "/")
        #expect(ReturnPath.safe(nil, request: request(authority: "foyer.test")) == "/")
    }

    @Test func wrongPasswordRerendersTheFormWith422() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let form = try await signInForm(client)
            try await client.execute(
                uri: "/sign_in", method: .post, headers: form.headers,
                body: formBody([("authenticity_token", form.token), ("email", TestUser.ada.email), ("password", "nope"), ("return_to", "/account")])
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains("That email or password is incorrect"))
                #expect(response.text.contains(#"value="ada@example.com""#))
                #expect(response.text.contains(#"name="return_to" value="/account""#))
                #expect(response.cookie(named: "foyer_session") == nil)
            }
        }
    }

    @Test func nativeShellIsSentToRefreshHistoricalLocationAfterSignIn() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let form = try await signInForm(client, headers: [.userAgent: "Hotwire Native iOS; Foyer/1.0"])
            try await client.execute(
                uri: "/sign_in", method: .post, headers: form.headers,
                body: formBody([("authenticity_token", form.token), ("email", TestUser.ada.email), ("password", TestUser.ada.password)])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/refresh_historical_location")
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func signOutRevokesAndRedirectsHome(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            for signOut in [("/sign_out", HTTPRequest.Method.post), ("/session", .delete)] {
                let (token, _) = try await signIn(client)
                let csrf = try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token)) { try csrfToken(in: $0.text) }
                var headers = cookieHeader(token)
                headers[CSRFMiddleware.headerName] = csrf
                try await client.execute(uri: signOut.0, method: signOut.1, headers: headers) { response in
                    #expect(response.status == .seeOther)
                    #expect(response.headers[.location] == "/")
                    #expect(response.cookie(named: "foyer_session")?.contains("Max-Age=0") == true)
                }
                try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                    #expect(response.status == .unauthorized)
                }
            }
        }
    }

    @Test func accountPageListsSessionsWithRevokeForms() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (phone, phoneSession) = try await signIn(client, userAgent: "Phone")
            let (laptop, _) = try await signIn(client, userAgent: "Laptop")
            let page = try await client.execute(uri: "/account", method: .get, headers: cookieHeader(laptop)) { response in
                #expect(response.status == .ok)
                return response.text
            }
            let phoneID = try #require(phoneSession["id"] as? String)
            #expect(page.contains("Phone") && page.contains("Laptop"))
            #expect(page.contains(#"action="/account/sessions/\#(phoneID)""#))
            #expect(page.contains("This device"))
            #expect(page.contains(#"title="Phone""#), "the raw user agent stays at hand")

            // The revoke button: a POST with _method=delete and the form's CSRF field.
            try await client.execute(
                uri: "/account/sessions/\(phoneID)", method: .post,
                headers: [.cookie: "foyer_session=\(laptop)", .contentType: "application/x-www-form-urlencoded"],
                body: formBody([("_method", "delete"), ("authenticity_token", try csrfToken(in: page))])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/account")
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(phone)) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }
}
