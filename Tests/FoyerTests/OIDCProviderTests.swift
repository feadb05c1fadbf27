import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

/// Providers as configured: flags, a providers file with secrets from the environment, Keycloak beside them.
@Suite struct OIDCProviderTests {
    func providersFile(_ json: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("providers-\(UUID().uuidString).json").path
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func flagsMakeOneProviderNamedByWhatItsButtonSays() throws {
        var config = FoyerConfig()
        config.oidcIssuer = "https://login.example.com/"
        config.oidcClientID = "foyer"
        config.oidcClientSecret = "s3cret"
        config.oidcName = "Example SSO"
        config.oidcAppClientIDs = "ios-app, android-app"
        config.oidcRolesClaim = "groups"
        let providers = try ConfiguredProviders.all(config: config, keycloak: nil)
        let provider = try #require(providers.first)
        #expect(providers.count == 1)
        #expect(provider.name == "example-sso" && provider.displayName == "Example SSO" && provider.signInPath == "/sign_in/example-sso")
        // Discovery §4: the trailing slash goes before the well-known path; the issuer is expected exactly as given.
        #expect(provider.discoveryURL == "https://login.example.com/.well-known/openid-configuration")
        #expect(provider.expectedIssuer == "https://login.example.com/")
        #expect(provider.appClientIDs == ["ios-app", "android-app"] && provider.audiences == ["foyer"] && provider.clientSecret == "s3cret")
        #expect(provider.roles(in: ["groups": ["admin", "staff"]]) == ["admin", "staff"])
        #expect(provider.roles(in: ["groups": "admin staff"]) == ["admin", "staff"])
        #expect(provider.roles(in: [:]) == [])
    }

    @Test func aProvidersFileNamesSeveralBesideKeycloakWithSecretsFromTheEnvironment() throws {
        var config = FoyerConfig()
        (config.keycloakURL, config.keycloakRealm, config.keycloakClientID) = ("http://127.0.0.1:1", "showcase", "foyer")
        config.oidcProvidersFile = try providersFile("""
            [{"name": "corp", "issuer": "https://sso.corp.example", "client_id": "foyer", "client_secret_env": "CORP_SECRET",
              "roles_claim": "realm.groups", "audiences": ["foyer", "phone"]},
             {"display_name": "Django", "issuer": "http://127.0.0.1:9/openid", "client_id": "web"}]
            """)
        config.environment = ["CORP_SECRET": "from-env"]
        let keycloak = try KeycloakSettings(config: config, mobileServices: nil)
        let providers = try ConfiguredProviders.all(config: config, keycloak: keycloak)
        #expect(providers.map(\.name) == ["keycloak", "corp", "django"])
        #expect(providers[0].expectedIssuer == nil && providers[0].word == "realm", "Keycloak's issuer follows its proxy")
        #expect(providers[0].roles(in: ["realm_access": ["roles": ["admin"]]]) == ["admin"])
        #expect(providers[1].clientSecret == "from-env" && providers[1].audiences == ["foyer", "phone"])
        #expect(providers[1].roles(in: ["realm": ["groups": ["ops"]]]) == ["ops"])
        #expect(providers[2].clientSecret == nil && providers[2].rolesClaims == nil && providers[2].roles(in: ["groups": ["x"]]) == nil)
    }

    @Test func mistakesStopStartUpSayingWhich() throws {
        func failure(_ change: (inout FoyerConfig) throws -> Void) throws -> String {
            var config = FoyerConfig()
            try change(&config)
            do {
                _ = try ConfiguredProviders.all(config: config, keycloak: nil)
                return "started"
            } catch let error as StartupError {
                return "\(error)"
            }
        }
        #expect(try failure { $0.oidcIssuer = "https://login.example.com" }.contains("without a client id"))
        #expect(try failure { ($0.oidcIssuer, $0.oidcClientID) = ("login.example.com", "foyer") }.contains("http(s) URL"))
        #expect(try failure { $0.oidcProvidersFile = try providersFile(#"{"issuer": "x"}"#) }.contains("is not a JSON list of providers"))
        #expect(try failure {
            $0.oidcProvidersFile = try providersFile(#"[{"issuer": "https://a.example", "client_id": "c", "client_secret_env": "UNSET_SECRET"}]"#)
        }.contains("UNSET_SECRET, which is not set"))
        #expect(try failure {
            $0.oidcProvidersFile = try providersFile(#"[{"name": "a", "issuer": "https://a.example", "client_id": "c"}, {"name": "A", "issuer": "https://b.example", "client_id": "c"}]"#)
        }.contains("two providers are named a"))
    }

    @Test func foyersOwnTokensShapeIsToldFromProvidersOpaqueTokens() {
        #expect(SessionRepository.looksLikeSessionToken(SessionRepository.randomToken()))
        #expect(!SessionRepository.looksLikeSessionToken(String(repeating: "a", count: 32)), "Django's opaque access tokens")
        #expect(!SessionRepository.looksLikeSessionToken(String(repeating: "a", count: 42) + "."))
    }

    @Test func aRevokedOrUnknownFoyerTokenIsNeverSentToAProviderWhileAnOpaqueTokenIsIntrospected() async throws {
        let provider = IntrospectingProvider()
        try await provider.application.test(.live) { providerClient in
            let harness = try await TestHarness { config in
                config.oidcIssuer = "http://127.0.0.1:\(providerClient.port!)"
                config.oidcClientID = "foyer"
                config.oidcClientSecret = "s3cret"
            }
            try await harness.test { client in
                let (token, _) = try await signIn(client)
                try await client.execute(uri: "/api/v1/sessions/current", method: .delete, headers: bearer(token)) { response in
                    #expect(response.status == .noContent)
                }
                let opaque = String(repeating: "ab", count: 16)
                for presented in [token, SessionRepository.randomToken(), opaque] {
                    try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(presented)) { response in
                        #expect(response.status == .unauthorized)
                    }
                }
                #expect(provider.introspected == [opaque], "only the token that is not shaped like Foyer's reached the provider")
            }
        }
    }
}

/// A provider that publishes an introspection endpoint, answers every token inactive and remembers which it was asked.
private final class IntrospectingProvider: Sendable {
    private let asked = NIOLockedValueBox<[String]>([])
    var introspected: [String] { asked.withLockedValue { $0 } }

    var application: some ApplicationProtocol {
        let router = Router()
        router.get(".well-known/openid-configuration") { request, _ -> Response in
            let issuer = "http://\(request.head.authority ?? "")"
            let document = [
                "issuer": issuer, "authorization_endpoint": issuer + "/authorize", "token_endpoint": issuer + "/token",
                "jwks_uri": issuer + "/jwks", "introspection_endpoint": issuer + "/introspect",
            ]
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(document))))
        }
        router.post("introspect") { [asked] request, _ -> Response in
            let form = String(buffer: try await request.body.collect(upTo: 1 << 16))
            let token = form.split(separator: "&").first { $0.hasPrefix("token=") }.map { String($0.dropFirst("token=".count)) }
            asked.withLockedValue { $0.append(token?.removingPercentEncoding ?? "") }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: #"{"active": false}"#)))
        }
        return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
    }
}
