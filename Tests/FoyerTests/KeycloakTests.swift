import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// What can be checked without a provider; the flows themselves run against one in Tests/Interop/test_keycloak.py.
@Suite struct KeycloakTests {
    /// Nobody listens at port 9: routes that would need the realm are not called here.
    static func configure(_ config: inout FoyerConfig) {
        config.keycloakURL = "http://127.0.0.1:9"
        config.keycloakRealm = "showcase"
        config.keycloakClientID = "foyer"
    }

    @Test func theSignInPageOffersKeycloakAndAsksForAUsername() async throws {
        let harness = try await TestHarness(configure: Self.configure)
        try await harness.test { client in
            try await client.execute(uri: "/sign_in?return_to=/tasks?page=2", method: .get) { response in
                let html = response.text
                #expect(html.contains(#"href="/sign_in/keycloak?return_to=%2Ftasks%3Fpage%3D2""#))
                #expect(html.contains(#"data-turbo="false""#))
                #expect(html.contains(#"<input type="text" name="email""#))
            }
        }
    }

    @Test func aCallbackWithoutItsBrowserCookieIsRefusedWithTheSignInPage() async throws {
        let harness = try await TestHarness(configure: Self.configure)
        try await harness.test { client in
            try await client.execute(uri: "/sign_in/keycloak/callback?code=abc&state=forged", method: .get) { response in
                #expect(response.status == .badRequest)
                #expect(response.text.contains("started in another browser"))
                #expect(response.headers[values: .setCookie].contains { $0.hasPrefix("foyer_keycloak_sign_in=;") })
            }
        }
    }

    @Test func otherRealmsAreNotForwarded() async throws {
        let harness = try await TestHarness(configure: Self.configure)
        try await harness.test { client in
            try await client.execute(uri: "/realms/master/.well-known/openid-configuration", method: .get) { response in
                #expect(response.status == .notFound)
            }
        }
    }

    @Test func keycloaksCookiesAndRedirectsNameFoyer() {
        let cookie = KeycloakProxyMiddleware.cookieForFoyer(
            "KEYCLOAK_SESSION=abc; Version=1; Path=/auth/realms/showcase/; Domain=sso.internal; Secure; HttpOnly",
            keycloakPath: "/auth", prefix: ""
        )
        #expect(cookie == "KEYCLOAK_SESSION=abc; Version=1; Path=/realms/showcase/; Secure; HttpOnly")
        #expect(
            KeycloakProxyMiddleware.replacingPrefix(
                "http://sso.internal/auth/realms/", with: "https://foyer.example/realms/",
                in: "http://sso.internal/auth/realms/showcase/login-actions/authenticate?x=1"
            ) == "https://foyer.example/realms/showcase/login-actions/authenticate?x=1"
        )
        #expect(KeycloakProxyMiddleware.replacingPrefix("http://sso.internal/auth/realms/", with: "x", in: "https://app.example/cb") == "https://app.example/cb")
    }

    @Test func claimsReadLikeSentences() throws {
        let rows = AccountController.readable([
            "sub": "bob", "exp": 1_795_289_243, "roles": ["user", "admin"], "email_verified": true,
            "realm_access": ["roles": ["admin"]],
        ])
        let byName = Dictionary(uniqueKeysWithValues: rows.map { ($0["name"]!, $0["value"]!) })
        #expect(rows.map { $0["name"]! } == ["email_verified", "exp", "realm_access", "roles", "sub"])
        #expect(byName["exp"] == Views.timestamp(Date(timeIntervalSince1970: 1_795_289_243)))
        #expect(byName["roles"] == "user, admin")
        #expect(byName["email_verified"] == "true")
        #expect(byName["realm_access"] == #"{"roles":["admin"]}"#)
        var config = FoyerConfig()
        (config.keycloakURL, config.keycloakRealm, config.keycloakClientID) = ("http://127.0.0.1:1", "showcase", "foyer")
        let keycloak = try #require(try KeycloakSettings(config: config, mobileServices: nil)).provider
        #expect(keycloak.roles(in: ["realm_access": ["roles": ["admin"]], "roles": ["user"]]) == ["admin", "user"])
    }
}
