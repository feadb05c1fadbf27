import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

@Suite struct PushTests {
    static let iosToken = String(repeating: "ab", count: 32)

    /// Push pointed at a port nobody listens on: every call to UPS fails at once, so registrations stay pending.
    static func unreachablePush(_ config: inout FoyerConfig, notify: Bool = false) {
        config.pushURL = "http://127.0.0.1:9"
        config.pushIOSVariantID = "ios-variant"
        config.pushIOSVariantSecret = "ios-secret"
        if notify {
            config.pushApplicationID = "app"
            config.pushMasterSecret = "master"
        }
    }

    static func registration(_ token: String, type: String = "ios") -> ByteBuffer {
        ByteBuffer(json: #"{"deviceToken": "\#(token)", "deviceType": "\#(type)", "operatingSystem": "iOS", "osVersion": "17.4"}"#)
    }

    static func outbox(_ database: any DatabaseWriter) async throws -> [(String, String?)] {
        try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT operation, device_token FROM push_outbox ORDER BY id").map { ($0["operation"], $0["device_token"]) }
        }
    }

    // MARK: - Configuration

    @Test func settingsComeFromFlagsAndEnvironmentOrTheMobileServicesFile() throws {
        var config = FoyerConfig()
        #expect(try PushSettings(config: config, mobileServices: nil) == nil)

        Self.unreachablePush(&config)
        let flags = try #require(try PushSettings(config: config, mobileServices: nil))
        #expect(flags.registryURL == "http://127.0.0.1:9/rest/registry/device")
        #expect(flags.variants[.ios]?.basicAuthorization == "Basic " + Data("ios-variant:ios-secret".utf8).base64EncodedString())
        #expect(flags.sender == nil && !flags.notifyTasks)

        let file = try MobileServices(data: Data(MobileServicesTests.showcase.utf8))
        let fromFile = try #require(try PushSettings(config: FoyerConfig(), mobileServices: file))
        #expect(fromFile.senderURL == "https://push.example/rest/sender")
        #expect(fromFile.variants[.android]?.id == "v-android" && fromFile.variants[.ios]?.secret == "s2")

        var notifying = FoyerConfig()
        Self.unreachablePush(&notifying, notify: true)
        #expect(try PushSettings(config: notifying, mobileServices: nil)?.notifyTasks == true)
        notifying.pushNotifyTasks = false
        #expect(try PushSettings(config: notifying, mobileServices: nil)?.notifyTasks == false)
    }

    @Test func halfAConfigurationNamesWhatIsMissing() {
        let cases: [((inout FoyerConfig) -> Void, String)] = [
            ({ $0.pushURL = "http://ups.example" }, "without a variant"),
            ({ $0.pushURL = "http://ups.example"; $0.pushAndroidVariantID = "a" }, "FOYER_PUSH_ANDROID_VARIANT_SECRET"),
            ({ $0.pushURL = "http://ups.example"; $0.pushIOSVariantSecret = "s" }, "--push-ios-variant-id"),
            ({ $0.pushIOSVariantID = "i"; $0.pushIOSVariantSecret = "s" }, "--push-url"),
            ({ $0.pushURL = "ups.example"; $0.pushIOSVariantID = "i"; $0.pushIOSVariantSecret = "s" }, "http:// or https://"),
            ({ Self.unreachablePush(&$0); $0.pushMasterSecret = "m" }, "FOYER_PUSH_APPLICATION_ID"),
            ({ Self.unreachablePush(&$0); $0.pushNotifyTasks = true }, "FOYER_PUSH_APPLICATION_ID and FOYER_PUSH_MASTER_SECRET"),
            ({ $0.pushNotifyTasks = true }, "needs a Unified Push Server"),
        ]
        for (configure, missing) in cases {
            var config = FoyerConfig()
            configure(&config)
            #expect {
                _ = try PushSettings(config: config, mobileServices: nil)
            } throws: { error in
                (error as? StartupError)?.description.contains(missing) == true
            }
        }
    }

    // MARK: - The devices API

    @Test func withoutPushTheDevicesAPISaysItIsNotConfigured() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let token = try await signIn(client).token
            try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(token).merging(jsonHeaders), body: Self.registration(Self.iosToken)) { response in
                #expect(response.status == .notImplemented)
                #expect((response.json()["error"] as? String)?.contains("--push-url") == true)
            }
        }
    }

    @Test func aRegistrationUPSCannotTakeWaitsAsPendingAndRemovalSupersedesIt() async throws {
        let harness = try await TestHarness { Self.unreachablePush(&$0) }
        try await harness.test(.live) { client in
            let token = try await signIn(client).token
            let headers = bearer(token).merging(jsonHeaders)
            try await client.execute(uri: "/api/v1/devices", method: .post, headers: headers, body: Self.registration(Self.iosToken)) { response in
                #expect(response.status == .accepted)
                let device = response.json()
                #expect(device["state"] as? String == "pending" && device["device_token"] as? String == Self.iosToken)
                #expect(response.headers[.location]?.hasSuffix("/api/v1/devices/\(Self.iosToken)") == true)
            }
            try await client.execute(uri: "/api/v1/devices", method: .get, headers: bearer(token)) { response in
                let list = try #require(try JSONSerialization.jsonObject(with: Data(response.text.utf8)) as? [[String: Any]])
                #expect(list.map { $0["state"] as? String } == ["pending"])
            }
            #expect(try await Self.outbox(harness.database).map(\.0) == ["register"])
            try await client.execute(uri: "/api/v1/devices/\(Self.iosToken)", method: .delete, headers: bearer(token)) { response in
                #expect(response.status == .accepted)
            }
            // The queued registration is replaced by the removal: UPS never hears of a device already gone.
            #expect(try await Self.outbox(harness.database).map(\.0) == ["unregister"])
            try await client.execute(uri: "/api/v1/devices/\(Self.iosToken)", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .notFound)
            }
        }
    }

    @Test func badRegistrationsAre422sAndStoreNothing() async throws {
        let harness = try await TestHarness { Self.unreachablePush(&$0) }
        try await harness.test(.live) { client in
            let ada = try await signIn(client).token
            let bob = try await signIn(client, as: .bob).token
            let bodies: [(String, String)] = [
                (#"{"deviceToken": "\#(Self.iosToken)", "deviceType": "blackberry"}"#, "deviceType"),
                (#"{"deviceToken": "\#(Self.iosToken)", "deviceType": "android"}"#, "deviceType"),  // no Android variant here
                (#"{"deviceToken": "", "deviceType": "ios"}"#, "deviceToken"),
                (#"{"deviceToken": 42, "deviceType": "ios"}"#, "deviceToken"),
                (#"{"token": "\#(String(repeating: "a", count: 4097))", "platform": "ios"}"#, "token"),
                (#"{"deviceToken": "a b", "deviceType": "ios"}"#, "deviceToken"),
                (#"{"deviceToken": "\#(Self.iosToken)", "deviceType": "ios", "osVersion": "\#(String(repeating: "9", count: 101))"}"#, "osVersion"),
                // 60 letters each with a combining mark: 60 characters to Swift, 120 to JSON Schema's maxLength (code points).
                (#"{"deviceToken": "\#(Self.iosToken)", "deviceType": "ios", "osVersion": "\#(String(repeating: "o\u{0301}", count: 60))"}"#, "osVersion"),
                (#"{"deviceToken": "\#(Self.iosToken)", "deviceType": "ios", "categories": ["\#(String(repeating: "e\u{0301}", count: 51))"]}"#, "categories"),
                (#"{"deviceToken": "\#(Self.iosToken)", "deviceType": "ios", "categories": [1]}"#, "categories"),
            ]
            for (body, field) in bodies {
                try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(ada).merging(jsonHeaders), body: ByteBuffer(json: body)) { response in
                    #expect(response.status == .unprocessableContent, "\(body)")
                    #expect((response.json()["errors"] as? [String: Any])?[field] != nil, "\(body): \(response.text)")
                }
            }
            try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(ada).merging(jsonHeaders), body: ByteBuffer(json: "[1]")) { response in
                #expect(response.status == .badRequest)
            }
            #expect(try await Self.outbox(harness.database).isEmpty)

            // Bob's device is not Ada's to take over, see or remove.
            _ = try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(bob).merging(jsonHeaders), body: Self.registration(Self.iosToken)) { _ in }
            try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(ada).merging(jsonHeaders), body: Self.registration(Self.iosToken)) { response in
                #expect(response.status == .unprocessableContent)
                #expect((response.json()["error"] as? String)?.contains("another account") == true)
            }
            try await client.execute(uri: "/api/v1/devices/\(Self.iosToken)", method: .delete, headers: bearer(ada)) { response in
                #expect(response.status == .notFound)
            }
            let owners = try await harness.database.read { db in try Int64.fetchAll(db, sql: "SELECT user_id FROM push_devices") }
            #expect(owners.count == 1)
        }
    }

    @Test func cookieClientsNeedTheCSRFToken() async throws {
        let harness = try await TestHarness { Self.unreachablePush(&$0) }
        try await harness.test(.live) { client in
            let token = try await signIn(client).token
            let headers = cookieHeader(token).merging(jsonHeaders).merging([.accept: "application/json"])
            try await client.execute(uri: "/api/v1/devices", method: .post, headers: headers, body: Self.registration(Self.iosToken)) { response in
                #expect(response.status == .forbidden, "a cookie without the form token is refused as cross-site")
            }
            #expect(try await Self.outbox(harness.database).isEmpty)
        }
    }

    // MARK: - Sessions ending

    @Test func revokingOrExpiringASessionQueuesTheRemovalOfItsDevices() async throws {
        let harness = try await TestHarness { Self.unreachablePush(&$0) }
        let other = String(repeating: "cd", count: 32)
        try await harness.test(.live) { client in
            let signedOut = try await signIn(client).token
            let kept = try await signIn(client).token
            for (token, device) in [(signedOut, Self.iosToken), (kept, other)] {
                _ = try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(token).merging(jsonHeaders), body: Self.registration(device)) { _ in }
            }
            try await client.execute(uri: "/api/v1/sessions/current", method: .delete, headers: bearer(signedOut)) { response in
                #expect(response.status == .noContent)
            }
        }
        #expect(try await Self.outbox(harness.database).map { "\($0.0) \($0.1 ?? "")" } == ["register \(other)", "unregister \(Self.iosToken)"])

        // A session that expires unused goes the same way when it is pruned.
        let sessions = SessionRepository(
            store: harness.store, lifetime: SessionLifetime(),
            ending: SessionEnding(
                sqlite: { db, ids in try SQLitePushStorage.sessionsEnding(ids, db: db) },
                postgres: { connection, ids in try await PostgresPushStorage.sessionsEnding(ids, connection: connection, logger: Logger(label: "test")) },
                afterwards: {}
            )
        )
        try await sessions.prune(now: Date().addingTimeInterval(400 * 86_400))
        #expect(try await Self.outbox(harness.database).map { "\($0.0) \($0.1 ?? "")" } == ["unregister \(Self.iosToken)", "unregister \(other)"])
        #expect(try await harness.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM push_devices") } == 0)
    }

    // MARK: - Task notifications

    @Test func aTaskMadeByAdaIsQueuedForBobsDevicesOnly() async throws {
        let harness = try await TestHarness { Self.unreachablePush(&$0, notify: true) }
        let other = String(repeating: "cd", count: 32)
        try await harness.test(.live) { client in
            let ada = try await signIn(client).token
            let bob = try await signIn(client, as: .bob).token
            for (token, device) in [(ada, Self.iosToken), (bob, other)] {
                _ = try await client.execute(uri: "/api/v1/devices", method: .post, headers: bearer(token).merging(jsonHeaders), body: Self.registration(device)) { _ in }
            }
            let mutation = #"{"query": "mutation { createTask(title: \"For Bob\", description: \"d\") { id } }"}"#
            try await client.execute(uri: "/graphql", method: .post, headers: bearer(ada).merging(jsonHeaders), body: ByteBuffer(json: mutation)) { response in
                #expect(response.status == .ok)
            }
        }
        let bobID = try await harness.database.read { db in try Int64.fetchOne(db, sql: "SELECT id FROM users WHERE email = ?", arguments: [TestUser.bob.email]) }
        var body: Data?
        for _ in 0..<100 where body == nil {
            body = try await harness.database.read { db in try Data.fetchOne(db, sql: "SELECT body FROM push_outbox WHERE operation = 'send'") }
            if body == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let sent = try #require(body)
        let bob = try #require(bobID)
        let message = try #require(try JSONSerialization.jsonObject(with: sent) as? [String: Any])
        #expect((message["criteria"] as? [String: Any])?["alias"] as? [String] == [String(bob)])
        let content = try #require(message["message"] as? [String: Any])
        #expect(content["alert"] as? String == "New task: For Bob")
        #expect((content["user-data"] as? [String: String])?["change"] == "created")
    }

    @Test func theAuthorsOfFoyersOwnMutationsAreReadFromTheirAnswers() {
        let authors = TaskAuthors()
        let now = Date()
        authors.record(answer: Data(#"{"data": {"createTask": {"id": "7", "title": "t"}, "gone": "8", "nothing": null}}"#.utf8), userID: 3, now: now)
        #expect(authors.author(of: "7", now: now) == 3 && authors.author(of: "8", now: now) == 3)
        #expect(authors.author(of: "9", now: now) == nil)
        #expect(authors.author(of: "7", now: now.addingTimeInterval(TaskAuthors.lifetime + 1)) == nil)
        authors.record(answer: Data(#"{"errors": [{"message": "no"}]}"#.utf8), userID: 4, now: now)
        #expect(authors.author(of: "7", now: now) == 3)
    }
}
