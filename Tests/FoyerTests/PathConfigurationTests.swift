import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

@Suite struct PathConfigurationTests {
    static let routes = [
        "/configurations/ios_v1.json", "/configurations/android_v1.json",
        "/turbo/ios/path_configuration", "/turbo/android/path_configuration",
    ]

    @Test(arguments: routes)
    func servedAsCacheableJSONWithoutAuth(path: String) async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let etag = try await client.execute(uri: path, method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json")
                #expect(response.headers[.cacheControl] == "no-cache")
                let body = response.json()
                #expect(body["settings"] is [String: Any])
                #expect(body["rules"] is [[String: Any]])
                return try #require(response.headers[.eTag])
            }
            try await client.execute(uri: path, method: .get, headers: [.ifNoneMatch: etag]) { response in
                #expect(response.status == .notModified)
                #expect(response.body.readableBytes == 0)
                #expect(response.headers[.eTag] == etag)
            }
            try await client.execute(uri: path, method: .get, headers: [.ifNoneMatch: "\"stale\", W/\(etag)"]) { response in
                #expect(response.status == .notModified)
            }
            try await client.execute(uri: path, method: .get, headers: [.ifNoneMatch: "\"stale\""]) { response in
                #expect(response.status == .ok)
            }
        }
    }

    /// An unknown platform is a 404, as documented, even when its name holds `..` (the file middleware behind the
    /// routes answered such paths with a bare 400; Schemathesis found it with `0..0`).
    @Test(arguments: ["/configurations/0..0_v1.json", "/configurations/web_v1.json", "/turbo/..x/path_configuration"])
    func anUnknownPlatformIsNotFound(path: String) async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: path, method: .get, headers: [.accept: "application/json"]) { response in
                #expect(response.status == .notFound)
            }
        }
    }

    @Test func shippedRulesCoverModalsSignInHomeAndHistoricalLocations() throws {
        let configuration = try PathConfiguration(contentsOf: packageRoot + "/path_configuration.json")
        for platform in PathConfiguration.Platform.allCases {
            let rules = try Self.rules(configuration, platform)
            func properties(matching path: String) -> [String: Any] {
                // Later matching rules win, as in Hotwire Native.
                rules.reduce(into: [String: Any]()) { merged, rule in
                    let patterns = rule["patterns"] as? [String] ?? []
                    if patterns.contains(where: { path.range(of: $0, options: .regularExpression) != nil }) {
                        merged.merge(rule["properties"] as? [String: Any] ?? [:]) { $1 }
                    }
                }
            }
            for path in ["/posts/new", "/posts/new?draft=1", "/posts/3/edit", "/tasks/3/edit?from=list"] {
                #expect(properties(matching: path)["context"] as? String == "modal", "\(platform) \(path)")
                #expect(properties(matching: path)["presentation"] as? String == "modal", "\(platform) \(path)")
            }
            #expect(properties(matching: "/sign_in")["presentation"] as? String == "authentication")
            // Signing up is presented as signing in is: a modal the app dismisses once a session exists.
            #expect(properties(matching: "/sign_up?return_to=%2Fposts")["presentation"] as? String == "authentication")
            #expect(properties(matching: "/sign_up")["context"] as? String == "modal")
            #expect(properties(matching: "/")["presentation"] as? String == "clear_all")
            #expect(properties(matching: "/posts")["presentation"] as? String != "clear_all")
            #expect(properties(matching: "/recede_historical_location")["presentation"] as? String == "pop")
            #expect(properties(matching: "/resume_historical_location")["presentation"] as? String == "none")
            #expect(properties(matching: "/refresh_historical_location")["presentation"] as? String == "refresh")
        }
        let android = try Self.rules(configuration, .android)
        #expect(android.first?["patterns"] as? [String] == [".*"])
        #expect((android.first?["properties"] as? [String: Any])?["uri"] is String)
        let ios = try Self.rules(configuration, .ios)
        #expect(!ios.contains { ($0["patterns"] as? [String]) == [".*"] })
    }

    @Test func brokenFilesStopStartUpWithAMessageNamingTheProblem() {
        let cases: [(String, String)] = [
            ("{", "not valid JSON"),
            ("[]", "top level must be a JSON object"),
            (#"{"rules": {}}"#, "rules must be an array"),
            (#"{"settings": {}}"#, "rules is missing"),
            (#"{"rules": [{"patterns": [], "properties": {}}]}"#, "rules[0].patterns must be a non-empty array"),
            (#"{"rules": [{"patterns": ["/ok", "(unclosed"], "properties": {}}]}"#, #"rules[0].patterns[1] "(unclosed" is not a valid regular expression"#),
            (#"{"rules": [{"patterns": ["/x"]}]}"#, "rules[0].properties must be an object"),
            (#"{"rules": [], "platforms": {"windows": {}}}"#, "platforms.windows is not a platform"),
            (#"{"rules": [], "setings": {}}"#, "unknown top-level key \"setings\""),
            (#"{"rules": [{"patterns": ["/x"], "properties": {}}]}"#, "android rules must start with a catch-all"),
        ]
        Self.expectRefused(cases)
    }

    /// Each file is refused with an error that contains its expected words.
    static func expectRefused(_ cases: [(json: String, expected: String)], sourceLocation: SourceLocation = #_sourceLocation) {
        for (json, expected) in cases {
            do {
                _ = try PathConfiguration(data: Data(json.utf8))
                Issue.record("accepted \(json)", sourceLocation: sourceLocation)
            } catch {
                #expect("\(error)".contains(expected), "\(json): \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func aBrokenFileStopsTheApplicationFromBuilding() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("broken-\(UUID()).json")
        try Data(#"{"rules": [{"patterns": ["("], "properties": {}}]}"#.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let harness = try await TestHarness { $0.pathConfigurationFile = file.path }
        await #expect(throws: StartupError.self) {
            try await harness.test { _ in }
        }
    }

    static func rules(_ configuration: PathConfiguration, _ platform: PathConfiguration.Platform) throws -> [[String: Any]] {
        let document = try #require(configuration.documents[platform])
        let object = try #require(try JSONSerialization.jsonObject(with: document.body) as? [String: Any])
        return try #require(object["rules"] as? [[String: Any]])
    }
}
