import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

@Suite struct MobileServicesTests {
    static let showcase = #"""
    {
      "version": "1", "namespace": "showcase", "clientId": "ionic-showcase", "clusterName": "https://cluster.example",
      "services": [
        { "id": "sync", "name": "sync", "type": "sync-app", "url": "http://127.0.0.1:9/graphql",
          "config": { "websocketUrl": "ws://127.0.0.1:9/graphql" } },
        { "id": "kc", "name": "keycloak", "type": "keycloak", "url": "https://sso.example/auth",
          "config": { "auth-server-url": "https://sso.example/auth", "realm": "showcase", "resource": "ionic-showcase",
                      "public-client": "true", "ssl-required": "external", "credentials": { "secret": "kc-secret" } } },
        { "id": "push", "name": "push", "type": "push", "url": "https://push.example/",
          "config": { "android": { "variantID": "v-android", "variantSecret": "s1" }, "ios": { "variantId": "v-ios", "variantSecret": "s2" } } }
      ]
    }
    """#

    @Test func readsTheShowcaseFileLeniently() throws {
        let services = try MobileServices(data: Data(Self.showcase.utf8))
        #expect(services.syncApp == .init(url: "http://127.0.0.1:9/graphql", webSocketURL: "ws://127.0.0.1:9/graphql"))
        #expect(services.keycloak == .init(authServerURL: "https://sso.example/auth", realm: "showcase", clientID: "ionic-showcase", publicClient: true))
    }

    @Test func brokenFilesAreClearStartUpErrors() {
        let cases: [(String, String)] = [
            ("[]", "not a JSON object"),
            (#"{"version": "one", "services": []}"#, "version must be a number"),
            (#"{"version": 1}"#, "services must be an array"),
            (#"{"services": [{"id": "x"}]}"#, "services[0] must be an object with a type"),
            (#"{"services": [{"type": "sync-app"}]}"#, "services[0] (sync-app) needs a url"),
            (#"{"services": [{"type": "keycloak", "config": {"realm": "r"}}]}"#, "needs config.auth-server-url"),
        ]
        for (json, expected) in cases {
            #expect(throws: StartupError.self) { try MobileServices(data: Data(json.utf8)) }
            do {
                _ = try MobileServices(data: Data(json.utf8))
            } catch {
                #expect("\(error)".contains(expected), "\(json): \(error)")
            }
        }
    }

    @Test func servedCopyPointsAtFoyerAndHasNoSecrets() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("mobile-services-\(UUID()).json")
        try Data(Self.showcase.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let harness = try await TestHarness { $0.mobileServicesFile = file.path }
        try await harness.test { client in
            let text = try await client.execute(uri: "/mobile-services.json", method: .get, headers: [HTTPField.Name("X-Forwarded-Proto")!: "https"]) { response in
                #expect(response.status == .ok)
                return response.text
            }
            #expect(!text.contains("secret") && !text.contains("s1") && !text.contains("kc-secret"))
            let root = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            let services = try #require(root["services"] as? [[String: Any]])
            let sync = try #require(services.first { $0["type"] as? String == "sync-app" })
            #expect(sync["url"] as? String == "https://localhost/graphql")
            #expect((sync["config"] as? [String: Any])?["websocketUrl"] as? String == "wss://localhost/graphql")
            let push = try #require(services.first { $0["type"] as? String == "push" })
            #expect(((push["config"] as? [String: Any])?["android"] as? [String: Any])?["variantID"] as? String == "v-android")

            // Its keycloak service is who checks passwords now: here nobody answers there, so sign-in is a 503.
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                body: ByteBuffer(json: #"{"email": "ada@example.com", "password": "correct horse battery"}"#)
            ) { response in
                #expect(response.status == .serviceUnavailable)
                #expect((response.json()["error"] as? String)?.contains("Keycloak cannot be reached") == true)
            }
            // The sync-app is the upstream: here an address nothing listens on, so /graphql is a 502.
            let ada = try await harness.database.read { db in try #require(try User.filter(Column("email") == TestUser.ada.email).fetchOne(db)) }
            let (_, token) = try await SessionRepository(database: harness.database).create(for: ada, userAgent: nil, ipAddress: nil)
            let (status, _) = try await graphQL(client, token: token, "{ allTasks { id } }")
            #expect(status == .badGateway)
        }
    }
}
