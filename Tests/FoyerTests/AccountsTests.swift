import Foundation
import GRDB
import HTTPTypes
import HummingbirdBcrypt
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import Foyer

/// Passwords whose every byte counts, the rules new ones must meet, sign-up through the API, and the mail outbox.
@Suite struct AccountsTests {
    // MARK: bcrypt's 72 bytes

    @Test(arguments: TestStoreKind.allCases) func everyByteOfALongPasswordCounts(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let users = UserRepository(store: store, passwordHashCost: 4)
        let passphrase = String(repeating: "correct horse battery staple ", count: 3) + "!"  // 88 bytes
        #expect(passphrase.utf8.count == 88)
        let prefix = String(passphrase.utf8.prefix(72))!
        try await users.create(email: "long@example.com", password: passphrase)
        #expect(try await users.authenticate(email: "long@example.com", password: passphrase) != nil)
        #expect(try await users.authenticate(email: "long@example.com", password: prefix) == nil, "bcrypt's 72-byte prefix alone")
        #expect(try await users.authenticate(email: "long@example.com", password: prefix + "anything else") == nil)

        // The boundary from the other side: exactly 72 bytes signs in, its 71-byte prefix does not.
        let exactly72 = String(passphrase.utf8.prefix(72))!
        try await users.create(email: "edge@example.com", password: exactly72)
        #expect(try await users.authenticate(email: "edge@example.com", password: exactly72) != nil)
        #expect(try await users.authenticate(email: "edge@example.com", password: String(exactly72.dropLast())) == nil)
    }

    @Test(arguments: TestStoreKind.allCases) func aHashFromBeforePreHashingStillSignsInAndIsMadeAgain(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let users = UserRepository(store: store, passwordHashCost: 4)
        let legacy = User(email: "old@example.com", name: "Old", passwordHash: Bcrypt.hash("an old password", cost: 4), createdAt: Date())
        let inserted = try await store.userStorage.insert(legacy)
        #expect(!Passwords.isPrehashed(legacy.passwordHash))
        #expect(try await users.authenticate(email: "old@example.com", password: "not the old one") == nil)
        #expect(try await users.authenticate(email: "old@example.com", password: "an old password") != nil)
        let stored = try #require(try await store.userStorage.find(id: inserted.id ?? 0))
        #expect(Passwords.isPrehashed(stored.passwordHash), "made again with every byte counting")
        #expect(try await users.authenticate(email: "old@example.com", password: "an old password") != nil)
    }

    // MARK: What a password must be

    @Test func passwordRulesHaveTheirBoundariesOnBothSides() throws {
        let english = try #require(Languages.shipped?.language(tag: "en"))
        func problems(_ password: String, email: String?) -> [String] { PasswordRules.problems(password, email: email).map(english.say) }
        #expect(problems("seven 7", email: nil) == ["is too short (minimum is 8 characters)"])
        #expect(problems("eight 88", email: nil) == [])
        #expect(problems(String(repeating: "é", count: 64), email: nil) == [], "64 characters, many bytes: accepted")
        #expect(problems(String(repeating: "x", count: PasswordRules.maximumLength) + "", email: nil).isEmpty)
        #expect(problems(String(repeating: "x", count: PasswordRules.maximumLength + 1), email: nil).first?.hasPrefix("is too long") == true)
        // No composition rules; but the lists of leaked passwords, whatever the case.
        #expect(problems("password1", email: nil) == ["is one of the most common passwords: choose another"])
        #expect(problems("PassWord1", email: nil) == ["is one of the most common passwords: choose another"])
        #expect(problems("sunflower meadow", email: nil) == [])
        #expect(problems("ada@example.com", email: "ada@example.com") == ["can't be your email address"])
        #expect(CommonPasswords.all.count > 8000)
    }

    // MARK: Signing up through the API

    @Test(arguments: TestStoreKind.allCases) func signingUpAnswersAsASignInAndATakenAddressIsRailsStyle(kind: TestStoreKind) async throws {
        let mailFolder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-mail-\(UUID())").path
        let harness = try await TestHarness(kind) { $0.mail.folder = mailFolder }
        try await harness.test { client in
            let body = #"{"name": "Grace Hopper", "email": "Grace@Example.com", "password": "a ship in harbor", "accept_terms": true}"#
            try await client.execute(
                uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: body)
            ) { response in
                #expect(response.status == .created)
                let token = try #require(response.headers[.xSessionToken])
                #expect(response.headers[.setCookie]?.contains("foyer_session=\(token)") == true)
                let user = try #require(response.json()["user"] as? [String: Any])
                #expect(user["name"] as? String == "Grace Hopper" && user["email"] as? String == "grace@example.com")
            }
            try await client.execute(
                uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(json: #"{"name": "Someone", "email": "grace@example.com", "password": "another good one", "accept_terms": "1"}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.json()["errors"] as? [String: [String]] == ["email": ["has already been taken"]])
            }
            try await client.execute(
                uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(json: #"{"name": " ", "email": "x", "password": "short"}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.json()["errors"] as? [String: [String]] == [
                    "name": ["can't be blank"], "email": ["is not an email address"], "password": ["is too short (minimum is 8 characters)"],
                    "accept_terms": ["must be accepted"],
                ])
            }
            // The welcome mail, written in the sign-up's transaction, reaches the folder once the sender took it.
            let deadline = Date().addingTimeInterval(10)
            var files: [String] = []
            while Date() < deadline {
                // Listed once the outbox is empty: before, the folder may hold the atomic write's temporary file.
                if try await harness.store.mailOutboxStorage.count() == 0 {
                    files = (try? FileManager.default.contentsOfDirectory(atPath: mailFolder)) ?? []
                    if !files.isEmpty { break }
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(files.count == 1 && files[0].hasSuffix(".eml"))
            let eml = try String(contentsOfFile: mailFolder + "/" + files[0], encoding: .utf8)
            #expect(eml.contains("To: \"Grace Hopper\" <grace@example.com>") && eml.contains("/email_confirmations/"))
        }
    }

    /// A stolen session cannot guess its way to the password: wrong current passwords count like failed sign-ins of
    /// that login (5 in 15 minutes), and the next is a 429 however right it is.
    @Test func wrongCurrentPasswordsAreThrottledLikeSignIns() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            func change(_ current: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/api/v1/me", method: .patch, headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                    body: ByteBuffer(json: #"{"password": "a whole new phrase", "current_password": "\#(current)"}"#)
                ) { $0 }
            }
            for _ in 1...SignInThrottle.perLogin {
                #expect(try await change("a wrong guess").status == .unprocessableContent)
            }
            let refused = try await change(TestUser.ada.password)
            #expect(refused.status == .tooManyRequests)
            #expect(Int(refused.headers[.retryAfter] ?? "") ?? 0 > 0)
        }
    }

    /// A new address is mailed a link and waits, shown on the account page; the old one is told and still signs
    /// in until the link's button is pressed; then the new one does and the old one does not.
    @Test func anAddressChangeWaitsForItsLinkThenMoves() async throws {
        let harness = try await TestHarness { $0.mail.folder = FileManager.default.temporaryDirectory.appendingPathComponent("mail-\(UUID())").path }
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let bearer: HTTPFields = [.authorization: "Bearer \(token)", .contentType: "application/json"]
            try await client.execute(
                uri: "/api/v1/me", method: .patch, headers: bearer,
                body: ByteBuffer(json: #"{"email": "ada@lovelace.example", "current_password": "\#(TestUser.ada.password)"}"#)
            ) { response in
                #expect(response.status == .ok)
                #expect(response.json()["email"] as? String == "ada@example.com", "not moved before it is confirmed")
            }
            try await client.execute(uri: "/account", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
                #expect(response.text.contains(#"id="pending-email">Waiting for <strong>ada@lovelace.example</strong>"#))
            }
            // The link is only in the mail: read it from the outbox (or the folder the sender wrote it to).
            let mails = try await harness.database.read { db in
                try Row.fetchAll(db, sql: "SELECT recipient, text_body FROM mail_outbox").map { ($0["recipient"] as String, $0["text_body"] as String) }
            }
            let folder = harness.config.mail.folder!
            // Only finished mails: a write under way is a temporary file that is renamed (or gone) a moment later.
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.hasSuffix(".eml") }
            let texts = mails.map { "\($0.0)\n\($0.1)" } + files.compactMap { try? String(contentsOfFile: folder + "/" + $0, encoding: .utf8) }
            #expect(texts.contains { $0.contains("ada@example.com") && $0.contains("is changing") }, "the old address is told")
            let confirmation = try #require(texts.first { $0.contains("ada@lovelace.example") && $0.contains("/email_confirmations/") })
            let secret = try #require(confirmation.replacingOccurrences(of: "=\r\n", with: "").split(whereSeparator: \.isWhitespace)
                .first { $0.contains("/email_confirmations/") }?.split(separator: "/").last.map(String.init))
            try await client.execute(uri: "/email_confirmations/\(secret)", method: .post) { response in
                #expect(response.status == .seeOther)
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer) { response in
                #expect(response.json()["email"] as? String == "ada@lovelace.example")
                #expect(response.json()["email_confirmed"] as? Bool == true)
            }
            #expect(try await harness.store.userStorage.find(email: "ada@example.com") == nil)
        }
    }

    /// A provider's account has no password here: deleting it asks for a sign-in within the last ten minutes.
    @Test func aProvidersAccountIsDeletedOnlyWithinTenMinutesOfSigningIn() async throws {
        let harness = try await TestHarness()
        let sessions = SessionRepository(store: harness.store)
        func providerUser(_ subject: String) async throws -> (User, String, String) {
            let user = try #require(try await harness.store.userStorage.providerUser(
                provider: "acme", subject: subject, email: "\(subject)@acme.example", newEmail: nil, separateEmail: "\(subject)@acme.invalid",
                name: subject, emailVerified: true
            ) { _, _ in false })
            let (session, token) = try await sessions.create(for: user, userAgent: "test", ipAddress: nil)
            return (user, session.id, token)
        }
        let (_, _, fresh) = try await providerUser("fresh")
        let (stale, staleSession, staleToken) = try await providerUser("stale")
        try await harness.database.write { db in
            try db.execute(sql: "UPDATE sessions SET created_at = ? WHERE id = ?", arguments: [Date().addingTimeInterval(-11 * 60), staleSession])
        }
        try await harness.test { client in
            try await client.execute(uri: "/api/v1/me", method: .delete, headers: [.authorization: "Bearer \(staleToken)"]) { response in
                #expect(response.status == .forbidden)
                #expect((response.json()["error"] as? String)?.contains("sign in again") == true)
            }
            try await client.execute(uri: "/api/v1/me", method: .delete, headers: [.authorization: "Bearer \(fresh)"]) { response in
                #expect(response.status == .noContent)
            }
        }
        #expect(try await harness.store.userStorage.find(id: stale.id!) != nil, "kept")
        #expect(try await harness.store.userStorage.find(email: "fresh@acme.example") == nil, "gone")
    }

    // MARK: The outbox

    /// Records what it was handed; fails while `failing` is set.
    final class RecordingDelivery: MailDelivery {
        let delivered = NIOLockedValueBox([String]())
        let failing = NIOLockedValueBox<DeliveryOutcome?>(nil)
        var summary: String { "recording" }

        func deliver(_ mail: OutgoingMail, from sender: MailAddress) async -> DeliveryOutcome {
            if let failure = failing.withLockedValue({ $0 }) { return failure }
            // A little time per mail, so two senders at once really overlap.
            try? await Task.sleep(for: .milliseconds(2))
            delivered.withLockedValue { $0.append(mail.messageID) }
            return .delivered
        }
    }

    static func mail(_ number: Int) -> OutgoingMail {
        OutgoingMail(
            to: "person\(number)@example.com", name: "Person \(number)", subject: "Mail \(number)", text: "Hello \(number)",
            html: "<p>Hello \(number)</p>", from: MailAddress(name: "Foyer", address: "no-reply@example.com")
        )
    }

    static func enqueue(_ mails: [OutgoingMail], in store: Store) async throws {
        let storage = store.accountStorage
        for mail in mails { try await storage.update(userId: 0, name: nil, passwordHash: nil, writes: AccountWrites(mails: [mail]), now: Date()) }
    }

    static func sender(_ store: Store, _ delivery: RecordingDelivery) -> MailSender {
        var logger = Logger(label: "test-mail")
        logger.logLevel = .critical
        return MailSender(
            outbox: store.mailOutboxStorage, delivery: delivery, sender: MailAddress(name: "Foyer", address: "no-reply@example.com"),
            metrics: FoyerMetrics(), logger: logger
        )
    }

    @Test(arguments: TestStoreKind.allCases) func twoInstancesSendingAtOnceSendEachMailOnce(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let other = try await Store.reopen(store)
        defer { if kind == .postgres { other.close() } }
        let mails = (1...60).map(Self.mail)
        try await Self.enqueue(mails, in: store)
        let (first, second) = (RecordingDelivery(), RecordingDelivery())
        async let a: Void = Self.sender(store, first).sendDue()
        async let b: Void = Self.sender(other, second).sendDue()
        _ = await (a, b)
        let sent = first.delivered.withLockedValue { $0 } + second.delivered.withLockedValue { $0 }
        #expect(sent.sorted() == mails.map(\.messageID).sorted(), "every mail once, none twice")
        #expect(try await store.mailOutboxStorage.count() == 0)
    }

    @Test(arguments: TestStoreKind.allCases) func aMailTheServerDidNotTakeWaitsAndIsGivenUpAfterADay(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        try await Self.enqueue([Self.mail(1)], in: store)
        let delivery = RecordingDelivery()
        let sender = Self.sender(store, delivery)
        delivery.failing.withLockedValue { $0 = .failed("421 try later") }
        let start = Date()
        await sender.sendDue(now: start)
        #expect(try await store.mailOutboxStorage.count() == 1, "kept for later")
        // Not due again before its backoff (at least 4.5 s: 5 s less the jitter), due after it (at most 5.5 s).
        delivery.failing.withLockedValue { $0 = nil }
        await sender.sendDue(now: start.addingTimeInterval(4.4))
        #expect(delivery.delivered.withLockedValue { $0 }.isEmpty)
        await sender.sendDue(now: start.addingTimeInterval(5.6))
        #expect(delivery.delivered.withLockedValue { $0 }.count == 1)
        #expect(try await store.mailOutboxStorage.count() == 0)

        // Failing for 24 hours: given up (just under the day it is still kept).
        try await Self.enqueue([Self.mail(2)], in: store)
        delivery.failing.withLockedValue { $0 = .failed("connection refused") }
        await sender.sendDue(now: Date().addingTimeInterval(24 * 3600 - 60))
        #expect(try await store.mailOutboxStorage.count() == 1)
        await sender.sendDue(now: Date().addingTimeInterval(24 * 3600 + 3600))
        #expect(try await store.mailOutboxStorage.count() == 0)
    }

    @Test func aRenderedMailHasBothPartsAMessageIDAndTheNameInTo() {
        let mail = OutgoingMail(
            to: "zoe@example.com", name: "Zoë Ünder", subject: "Grüße", text: "A line that is long enough to be folded by quoted-printable encoding, surely: é",
            html: "<p>é</p>", from: MailAddress(name: "Foyer", address: "no-reply@example.com")
        )
        let text = mail.rendered(from: MailAddress(name: "Foyer", address: "no-reply@example.com"))
        #expect(text.contains("To: =?utf-8?b?") && text.contains("<zoe@example.com>"))
        #expect(text.contains("Subject: =?utf-8?b?"))
        #expect(text.contains("Message-ID: \(mail.messageID)") && mail.messageID.hasSuffix("@example.com>"))
        #expect(text.contains("Content-Type: text/plain; charset=utf-8") && text.contains("Content-Type: text/html; charset=utf-8"))
        #expect(text.contains("=C3=A9"), "UTF-8 in quoted-printable")
        #expect(text.split(separator: "\r\n", omittingEmptySubsequences: false).allSatisfy { $0.utf8.count <= 78 }, "no line over 78")
    }
}
