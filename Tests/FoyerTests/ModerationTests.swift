import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import Foyer
@testable import FoyerServer

/// Terms accepted before posting, the operator's address, and roles.
@Suite struct TermsTests {
    static let carol = TestUser(email: "carol@example.com", password: "carol's own words")

    /// Carol's account as a provider makes one: she never accepted the terms. `role`: the queue's tests make her a
    /// moderator.
    static func addCarol(to harness: TestHarness, as role: User.Role? = nil) async throws {
        let users = UserRepository(store: harness.store, passwordHashCost: 4)
        let hash = try await users.passwords.hash(carol.password)
        _ = try await harness.store.userStorage.insert(User(email: carol.email, name: "Carol", passwordHash: hash, createdAt: Date()))
        if let role { _ = try await users.setRole(role, email: carol.email) }
    }

    static let newPost = ByteBuffer(json: #"{"title": "Hello", "content": "First words"}"#)

    @Test(arguments: TestStoreKind.allCases) func anAccountThatHasNotAcceptedTheTermsMayReadButNotPostUntilItAccepts(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await Self.addCarol(to: harness)
        try await harness.test { client in
            let (token, _) = try await signIn(client, as: Self.carol)
            let json = bearer(token).merging([.contentType: "application/json"])
            try await client.execute(uri: "/api/v1/posts", method: .get, headers: bearer(token)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { response in
                #expect(response.status == .forbidden)
                let body = response.json()
                #expect(body["error"] as? String == "terms_not_accepted" && body["terms_url"] as? String == "/terms")
            }
            let version = try await client.execute(uri: "/terms", method: .get, headers: bearer(token).merging([.accept: "application/json"])) { response in
                let body = response.json()
                #expect(body["accepted"] as? Bool == false)
                return try #require(body["version"] as? String)
            }
            #expect(version.count == 16)
            // A page that would show the form shows the terms and their button instead.
            try await client.execute(uri: "/posts/new", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.status == .forbidden)
                #expect(response.text.contains(#"action="/terms/accept""#) && response.text.contains("Zero tolerance"))
            }
            try await client.execute(uri: "/api/v1/me/terms", method: .post, headers: json, body: ByteBuffer(json: #"{"version": "0000000000000000"}"#)) { response in
                #expect(response.status == .unprocessableContent)
                #expect((response.json()["errors"] as? [String: [String]])?["version"] != nil)
            }
            try await client.execute(uri: "/api/v1/me/terms", method: .post, headers: json, body: ByteBuffer(json: #"{"version": "\#(version)"}"#)) { response in
                #expect(response.status == .ok)
                #expect(response.json()["accepted"] as? Bool == true)
            }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { #expect($0.status == .created) }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.json()["terms_accepted_at"] is String)
            }
        }
    }

    @Test func theButtonOnTheTermsPageAcceptsThemAndReturnsToTheForm() async throws {
        let harness = try await TestHarness()
        try await Self.addCarol(to: harness)
        try await harness.test { client in
            let (token, _) = try await signIn(client, as: Self.carol)
            let csrf = try await client.execute(uri: "/terms?return_to=/posts/new", method: .get, headers: cookieHeader(token)) { response in
                #expect(response.text.contains(#"name="return_to" value="/posts/new""#))
                return try csrfToken(in: response.text)
            }
            var headers = cookieHeader(token)
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: "/terms/accept", method: .post, headers: headers, body: formBody([("authenticity_token", csrf), ("return_to", "/posts/new")])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/posts/new")
            }
            try await client.execute(uri: "/posts/new", method: .get, headers: cookieHeader(token)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/terms", method: .get, headers: cookieHeader(token)) { response in
                #expect(!response.text.contains(#"action="/terms/accept""#) && response.text.contains("You accepted these terms on"))
            }
        }
    }

    @Test func signingUpNeedsTheTermsAcceptedAndCountsAsAccepting() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for refused in [#""accept_terms": false"#, #""accept_terms": "0""#, #""ignored": 1"#] {
                let body = #"{"name": "Dee", "email": "dee@example.com", "password": "dee's fine words", \#(refused)}"#
                try await client.execute(uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: body)) { response in
                    #expect(response.status == .unprocessableContent)
                    #expect(response.json()["errors"] as? [String: [String]] == ["accept_terms": ["must be accepted"]])
                }
            }
            let body = #"{"name": "Dee", "email": "dee@example.com", "password": "dee's fine words", "accept_terms": true}"#
            let token = try await client.execute(uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: body)) { response in
                #expect(response.status == .created)
                return try #require(response.headers[.xSessionToken])
            }
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging([.contentType: "application/json"]), body: Self.newPost
            ) { #expect($0.status == .created) }
            // The form says what is missing beside the checkbox.
            try await client.execute(uri: "/sign_up", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains(#"name="accept_terms""#) && response.text.contains(#"href="/terms""#))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func newTermsAreAcceptedAgainAndTheFirstCoverAccountsMadeBeforeThem(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-terms-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent("terms.md")
        try "# Our terms\n\nBe **kind**. No objectionable content.\n".write(to: file, atomically: true, encoding: .utf8)
        var config = harness.config
        config.moderation.termsFile = file.path
        config.moderation.contactEmail = "help@example.org"
        // Ada was made by the operator before any terms were served: the first terms count as accepted.
        let firstApp = try await buildApplication(config, store: harness.store)
        try await firstApp.test(.router) { client in
            let (token, _) = try await signIn(client)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging([.contentType: "application/json"]), body: Self.newPost
            ) { #expect($0.status == .created) }
            try await client.execute(uri: "/terms", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains("<h1>Our terms</h1>") && response.text.contains("<strong>kind</strong>"))
            }
            try await client.execute(uri: "/contact", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains("mailto:help@example.org"))
                #expect(response.text.contains(#"<a href="/terms">Terms</a>"#) && response.text.contains(#"<a href="/contact">Contact</a>"#))
            }
        }
        try "# Our terms\n\nBe **kind**. No objectionable content, and no abuse.\n".write(to: file, atomically: true, encoding: .utf8)
        // The first app's end closed its store: the second opens its own on the same tables.
        let changedApp = try await buildApplication(config, store: try await Store.reopen(harness.store))
        try await changedApp.test(.router) { client in
            let (token, _) = try await signIn(client)
            let json = bearer(token).merging([.contentType: "application/json"])
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { response in
                #expect(response.status == .forbidden)
            }
            try await client.execute(uri: "/api/v1/me/terms", method: .post, headers: json) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json, body: Self.newPost) { #expect($0.status == .created) }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func rolesAreGivenByAddressAndShownToTheirHolder(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        let users = UserRepository(store: harness.store, passwordHashCost: 4)
        #expect(try await users.setRole(.moderator, email: " ADA@example.com ")?.role == .moderator)
        #expect(try await users.setRole(.admin, email: "nobody@example.com") == nil)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.json()["role"] as? String == "moderator")
            }
        }
        let store = try await Store.reopen(harness.store)
        defer { store.close() }
        #expect(try await UserRepository(store: store).setRole(nil, email: "ada@example.com")?.role == nil)
        #expect(try await store.userStorage.find(email: "ada@example.com")?.role == nil)
    }
}

/// Reports of posts and people: filed once per open target, a copy kept, moderators mailed, at most 20 an hour.
@Suite struct ReportsTests {
    static func post(_ client: some TestClientProtocol, token: String, title: String) async throws -> Int64 {
        try await client.execute(
            uri: "/api/v1/posts", method: .post, headers: bearer(token).merging([.contentType: "application/json"]),
            body: ByteBuffer(json: #"{"title": "\#(title)", "content": "Words of \#(title)"}"#)
        ) { response in
            #expect(response.status == .created)
            return try #require(response.json()["id"] as? Int64 ?? (response.json()["id"] as? Int).map(Int64.init))
        }
    }

    static func report(_ client: some TestClientProtocol, token: String, _ body: String) async throws -> (HTTPResponse.Status, [String: Any], String?) {
        try await client.execute(
            uri: "/api/v1/reports", method: .post, headers: bearer(token).merging([.contentType: "application/json"]), body: ByteBuffer(json: body)
        ) { ($0.status, $0.json(), $0.headers[.retryAfter]) }
    }

    @Test(arguments: TestStoreKind.allCases) func aReportIsFiledOnceKeepsWhatWasReportedAndTellsTheModerators(kind: TestStoreKind) async throws {
        let mailFolder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-mail-\(UUID())").path
        let harness = try await TestHarness(kind) { $0.mail.folder = mailFolder }
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let id = try await Self.post(client, token: ada, title: "Buy now")
            try await client.execute(
                uri: "/api/v1/reports", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: #"{"post_id": \#(id), "reason": "spam"}"#)
            ) { #expect($0.status == .unauthorized) }
            for (body, field) in [
                (#"{"post_id": \#(id), "reason": "boring"}"#, "reason"), (#"{"reason": "spam"}"#, "post_id"),
                (#"{"post_id": \#(id), "user_id": 1, "reason": "spam"}"#, "post_id"), (#"{"post_id": 999999, "reason": "spam"}"#, "post_id"),
                (#"{"post_id": \#(id), "reason": "spam", "comment": "\#(String(repeating: "x", count: 1001))"}"#, "comment"),
            ] {
                let (status, json, _) = try await Self.report(client, token: bob, body)
                #expect(status == .unprocessableContent && (json["errors"] as? [String: [String]])?[field] != nil, "\(body.prefix(60))")
            }
            // Nobody reports their own post.
            #expect(try await Self.report(client, token: ada, #"{"post_id": \#(id), "reason": "spam"}"#).0 == .unprocessableContent)
            let comment = String(repeating: "y", count: 1000)
            let (status, first, _) = try await Self.report(client, token: bob, #"{"post_id": \#(id), "reason": "spam", "comment": "\#(comment)"}"#)
            #expect(status == .created && first["status"] as? String == "open" && first["reason"] as? String == "spam")
            let (again, second, _) = try await Self.report(client, token: bob, #"{"post_id": \#(id), "reason": "hate"}"#)
            #expect(again == .ok && second["id"] as? Int == first["id"] as? Int, "the same open report, not a second one")
            let (person, aboutAda, _) = try await Self.report(client, token: bob, #"{"user_id": 1, "reason": "harassment"}"#)
            #expect(person == .created && aboutAda["id"] as? Int != first["id"] as? Int)
            // The author changes the post afterwards: the report still holds what was reported.
            try await client.execute(
                uri: "/api/v1/posts/\(id)", method: .patch, headers: bearer(ada).merging([.contentType: "application/json"]),
                body: ByteBuffer(json: #"{"title": "Innocent now"}"#)
            ) { #expect($0.status == .ok) }
        }
        let store = try await Store.reopen(harness.store)
        defer { store.close() }
        let kept = try await store.reportStorage.file(
            ReportDraft(reporterId: 2, target: .post(1), reason: .spam, comment: ""), now: Date(), mails: { _, _, _ in [] }
        )
        guard case .alreadyOpen(let report) = kept else { Issue.record("expected the open report, got \(kept)"); return }
        #expect(report.keptTitle == "Buy now" && report.keptContent == "Words of Buy now" && report.comment.count == 1000)
        // Carol, the moderator, was mailed about each new report.
        try await eventually(within: .seconds(30)) {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: mailFolder)) ?? []
            let mails = files.compactMap { try? String(contentsOfFile: mailFolder + "/" + $0, encoding: .utf8) }
            return mails.filter { $0.contains("carol@example.com") && $0.contains("New report") }.count == 2
        }
    }

    /// A report keeps the post's picture as it was: the author deleting the post leaves it with the moderators, who
    /// alone may see it.
    @Test(arguments: TestStoreKind.allCases) func aReportKeepsThePicturesPixelsForTheModeratorsAlone(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            let created = try await PictureUploadTests().upload(client, token: ada) { body in
                body.field("title", "With a picture")
                body.field("alt", "A red corner")
                body.file("picture", filename: "photo.png", type: "image/png", PictureUploadTests.png)
            }
            #expect(created.status == .created, "\(created.text)")
            let post = created.json()
            let id = try #require(post["id"] as? Int)
            let page = try #require(((post["picture"] as? [String: Any])?["url"] as? String).flatMap { URL(string: $0)?.path })
            let shown = try await client.execute(uri: page, method: .get, headers: [.accept: "image/jpeg"]) { ByteBuffer($0.body.readableBytesView) }
            let (status, report, _) = try await Self.report(client, token: bob, #"{"post_id": \#(id), "reason": "sexual"}"#)
            #expect(status == .created)
            let reportID = try #require(report["id"] as? Int)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .delete, headers: bearer(ada)) { #expect($0.status == .noContent) }
            try await client.execute(uri: page, method: .get) { #expect($0.status == .notFound, "the post's own picture went with it") }

            let kept = "/moderation/reports/\(reportID)/picture"
            try await client.execute(uri: kept, method: .get, headers: bearer(carol)) { response in
                #expect(response.status == .ok && response.headers[.contentType] == "image/jpeg")
                #expect(response.headers[.cacheControl] == "private, no-store")
                #expect(ByteBuffer(response.body.readableBytesView) == shown, "the page-size JPEG as it was shown")
            }
            for reader in [ada, bob] {
                try await client.execute(uri: kept, method: .get, headers: bearer(reader)) { #expect($0.status == .forbidden) }
            }
            try await client.execute(uri: "/api/v1/moderation/reports", method: .get, headers: bearer(carol)) { response in
                let reports = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                let keptCopy = try #require(reports.first { $0["id"] as? Int == reportID }?["kept"] as? [String: Any])
                #expect(keptCopy["picture_url"] as? String == kept && keptCopy["picture_alt"] as? String == "A red corner")
            }
            try await client.execute(uri: "/moderation", method: .get, headers: cookieHeader(carol)) { response in
                #expect(response.text.contains(#"<img class="kept-picture" src="\#(kept)" alt="A red corner""#))
            }
            // A report about a post without a picture, or about a person, kept none.
            let plain = try await Self.post(client, token: ada, title: "Words only")
            let (_, wordsOnly, _) = try await Self.report(client, token: bob, #"{"post_id": \#(plain), "reason": "spam"}"#)
            try await client.execute(uri: "/moderation/reports/\(wordsOnly["id"] as? Int ?? 0)/picture", method: .get, headers: bearer(carol)) {
                #expect($0.status == .notFound)
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aPersonMayReportTwentyTimesAnHourAndNotOnceMore(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            var ids: [Int64] = []
            for number in 1...21 { ids.append(try await Self.post(client, token: ada, title: "Post \(number)")) }
            for id in ids.prefix(20) {
                #expect(try await Self.report(client, token: bob, #"{"post_id": \#(id), "reason": "other"}"#).0 == .created)
            }
            let (status, json, retryAfter) = try await Self.report(client, token: bob, #"{"post_id": \#(ids[20]), "reason": "other"}"#)
            #expect(status == .tooManyRequests && (json["error"] as? String)?.contains("20 reports") == true)
            let seconds = try #require(retryAfter.flatMap { Int($0) })
            #expect(seconds > 3500 && seconds <= 3600)
            // Another person is not held by Bob's count.
            #expect(try await Self.report(client, token: ada, #"{"user_id": 2, "reason": "other"}"#).0 == .created)
        }
    }

    @Test func theReportFormIsOfferedToReadersButNotTheAuthorAndFilesFromTheWeb() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let id = try await Self.post(client, token: ada, title: "Hello")
            try await client.execute(uri: "/posts/\(id)", method: .get, headers: cookieHeader(ada)) { #expect(!$0.text.contains("/report")) }
            try await client.execute(uri: "/posts/\(id)", method: .get, headers: browserHeaders) { #expect(!$0.text.contains("/report")) }
            try await client.execute(uri: "/posts/\(id)", method: .get, headers: cookieHeader(bob)) {
                #expect($0.text.contains(#"href="/posts/\#(id)/report""#))
            }
            let csrf = try await client.execute(uri: "/posts/\(id)/report", method: .get, headers: cookieHeader(bob)) { response in
                #expect(response.status == .ok && response.text.contains(#"value="harassment""#))
                return try csrfToken(in: response.text)
            }
            var headers = cookieHeader(bob)
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: "/posts/\(id)/report", method: .post, headers: headers, body: formBody([("authenticity_token", csrf), ("comment", "hm")])
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains(#"id="reason-error""#) && response.text.contains(">hm</textarea>"))
            }
            try await client.execute(
                uri: "/posts/\(id)/report", method: .post, headers: headers,
                body: formBody([("authenticity_token", csrf), ("reason", "spam"), ("comment", "hm")])
            ) { response in
                #expect(response.status == .seeOther && response.headers[.location] == "/posts/\(id)")
            }
        }
    }
}

/// The queue and what moderators do from it: remove and restore a post, suspend and reinstate an account, roles.
@Suite struct ModerationQueueTests {
    static func json(_ token: String) -> HTTPFields { bearer(token).merging([.contentType: "application/json"]) }

    static func act(_ client: some TestClientProtocol, token: String, report: Int, _ body: String) async throws -> (HTTPResponse.Status, [String: Any]) {
        try await client.execute(
            uri: "/api/v1/moderation/reports/\(report)/actions", method: .post, headers: json(token), body: ByteBuffer(json: body)
        ) { ($0.status, $0.json()) }
    }

    static func mails(in folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).compactMap {
            try? String(contentsOfFile: folder + "/" + $0, encoding: .utf8)
        }
    }

    /// A removed post's picture goes with it: its URL answers 404 to everyone but the author and moderators (served
    /// to them uncached), even to a reader who fetched it before, until the post is restored.
    @Test(arguments: TestStoreKind.allCases) func aRemovedPostsPictureIsServedToItsAuthorAndModeratorsAlone(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            let created = try await PictureUploadTests().upload(client, token: ada) { body in
                body.field("title", "Shown, then taken down")
                body.file("picture", filename: "photo.png", type: "image/png", PictureUploadTests.png)
            }
            let post = created.json()
            let id = try #require(post["id"] as? Int)
            let thumbnail = try #require(((post["picture"] as? [String: Any])?["thumbnail_url"] as? String).flatMap { URL(string: $0)?.path })
            // Read (and kept in memory) while the post is shown.
            try await client.execute(uri: thumbnail, method: .get) { response in
                #expect(response.status == .ok && response.headers[.cacheControl] == "public, max-age=31536000, immutable")
            }
            let (_, report, _) = try await ReportsTests.report(client, token: bob, #"{"post_id": \#(id), "reason": "sexual"}"#)
            let reportID = try #require(report["id"] as? Int)
            #expect(try await Self.act(client, token: carol, report: reportID, #"{"action": "remove_post", "note": "Not here."}"#).0 == .ok)
            for reader in [nil, bob] {
                try await client.execute(uri: thumbnail, method: .get, headers: reader.map(bearer) ?? [:]) { #expect($0.status == .notFound) }
            }
            for allowed in [ada, carol] {
                try await client.execute(uri: thumbnail, method: .get, headers: bearer(allowed)) { response in
                    #expect(response.status == .ok && response.headers[.cacheControl] == "private, no-store")
                }
            }
            #expect(try await Self.act(client, token: carol, report: reportID, #"{"action": "restore", "note": ""}"#).0 == .ok)
            try await client.execute(uri: thumbnail, method: .get) { #expect($0.status == .ok) }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aRemovedPostIsGoneForAllButItsAuthorAndModeratorsUntilRestored(kind: TestStoreKind) async throws {
        let mailFolder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-mail-\(UUID())").path
        let harness = try await TestHarness(kind) { $0.mail.folder = mailFolder }
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            let id = try await ReportsTests.post(client, token: ada, title: "Cheap pills")
            let kept = try await ReportsTests.post(client, token: ada, title: "A kind post")
            let (_, filed, _) = try await ReportsTests.report(client, token: bob, #"{"post_id": \#(id), "reason": "spam", "comment": "ads again"}"#)
            _ = try await ReportsTests.report(client, token: carol, #"{"post_id": \#(id), "reason": "illegal"}"#)
            let report = try #require(filed["id"] as? Int)
            // Only moderators see the queue.
            try await client.execute(uri: "/moderation", method: .get, headers: cookieHeader(bob)) { #expect($0.status == .forbidden) }
            try await client.execute(uri: "/api/v1/moderation/reports", method: .get, headers: bearer(bob)) { #expect($0.status == .forbidden) }
            try await client.execute(uri: "/moderation", method: .get, headers: browserHeaders) { #expect($0.status == .unauthorized) }
            try await client.execute(uri: "/moderation", method: .get, headers: cookieHeader(carol)) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains("A post by ada") && response.text.contains("by 2 people") && response.text.contains("ads again"))
                #expect(response.text.contains(#"value="remove_post""#))
            }
            try await client.execute(uri: "/api/v1/moderation/reports?status=open", method: .get, headers: bearer(carol)) { response in
                let reports = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                #expect(reports.count == 2 && reports.allSatisfy { $0["post_state"] as? String == "shown" })
                #expect((reports[0]["kept"] as? [String: Any])?["title"] as? String == "Cheap pills")
            }
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "explode"}"#).0 == .unprocessableContent)
            #expect(try await Self.act(client, token: carol, report: 999_999, #"{"action": "dismiss"}"#).0 == .notFound)
            #expect(try await Self.act(client, token: bob, report: report, #"{"action": "dismiss"}"#).0 == .forbidden)
            let (status, done) = try await Self.act(client, token: carol, report: report, #"{"action": "remove_post", "note": "Selling pills breaks the terms"}"#)
            #expect(status == .ok && done["resolved_reports"] as? Int == 2)

            for (who, expected) in [(nil, HTTPResponse.Status.notFound), (bob, .notFound), (ada, .ok), (carol, .ok)] {
                try await client.execute(uri: "/api/v1/posts/\(id)", method: .get, headers: who.map(bearer) ?? [:]) { response in
                    #expect(response.status == expected, "\(who == nil ? "signed out" : who!)")
                }
            }
            try await client.execute(uri: "/posts/\(id)", method: .get, headers: browserHeaders) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/api/v1/posts", method: .get) { response in
                let ids = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]]).compactMap { $0["id"] as? Int }
                #expect(ids == [Int(kept)] && response.headers[.xTotalCount] == "1")
            }
            try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { #expect(!$0.text.contains("Cheap pills")) }
            try await client.execute(uri: "/api/v1/moderation/audit", method: .get, headers: bearer(carol)) { response in
                let log = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                #expect(log.first?["action"] as? String == "remove_post" && log.first?["note"] as? String == "Selling pills breaks the terms")
                #expect(log.first?["moderator_name"] as? String == "Carol")
            }
            try await client.execute(uri: "/api/v1/moderation/reports", method: .get, headers: bearer(carol)) { response in
                #expect(String(buffer: response.body) == "[]")
            }
            // Restored, it is back for everyone.
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "restore"}"#).0 == .ok)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get) { #expect($0.status == .ok) }
        }
        // Ada is told why and how to appeal, Bob that his report was handled; neither mail names the other.
        try await eventually {
            let mails = Self.mails(in: mailFolder)
            return mails.contains { $0.contains("ada@example.com") && $0.contains("Your post was removed") }
                && mails.contains { $0.contains("bob@example.com") && $0.contains("Your report was handled") }
        }
        let toAda = try #require(Self.mails(in: mailFolder).first { $0.contains("Your post was removed") })
        #expect(toAda.contains("appeal") && toAda.contains("Selling pills") && !toAda.contains("bob") && !toAda.contains("Carol"))
    }

    /// Each person is told in their own language, whoever acted and in whichever: the author whose post went in
    /// Portuguese, the reporter in English, the moderators of a new report in Chinese; what it was about in each.
    @Test func moderationMailIsInEachRecipientsLanguage() throws {
        let languages = try Languages.bundled()
        let mail = AccountMail(origin: "https://foyer.example", sender: try #require(MailAddress(parsing: "Foyer <foyer@foyer.example>")), languages: languages)
        func person(_ name: String, _ locale: String?) -> User {
            var user = User(email: "\(name)@example.com", name: name, passwordHash: "", createdAt: Date())
            user.locale = locale
            return user
        }
        let (ada, bob, carol) = (person("ada", "pt-BR"), person("bob", nil), person("carol", "zh-Hans"))
        let target = ModerationTarget.post(title: "Cheap pills", by: "ada")
        let sent = ModerationMail(mail: mail, contactEmail: "moderation@foyer.example").mails(for: .removePost, note: "Not here.")(ada, [bob], target)
        let toAda = try #require(sent.first { $0.recipient == ada.email })
        #expect(toAda.subject == "Sua publicação foi removida")
        #expect(toAda.text.contains("Um moderador removeu a publicação “Cheap pills” de ada") && toAda.text.contains("Nas palavras do moderador: “Not here.”"))
        #expect(toAda.html.contains(#"<html lang="pt-BR">"#) && toAda.text.contains("Para recorrer"))
        let toBob = try #require(sent.first { $0.recipient == bob.email })
        #expect(toBob.subject == "Your report was handled" && toBob.text.contains("the post “Cheap pills” by ada. It broke the terms and has been removed."))
        #expect(!toBob.text.contains("Not here."), "a reporter is never told what the author was")

        let report = Report(
            id: 7, reporterId: 2, postId: 1, userId: 1, reason: .spam, comment: "ads again", keptTitle: "Cheap pills", keptContent: nil,
            keptPictureAlt: nil, status: .open, createdAt: Date(), resolvedAt: nil
        )
        let toModerators = ReportsController.moderatorMails(mail: mail, reporterName: "bob")(report, target, [carol, bob])
        #expect(toModerators.map(\.subject) == ["新举报：垃圾信息或诈骗", "New report: Spam or a scam"])
        #expect(toModerators[0].text.contains("bob 举报了ada 的帖子“Cheap pills”。") && toModerators[0].text.contains("举报人留言：“ads again”"))
    }

    /// The queue, the log and the API's refusals in the moderator's language; the log names what each action was on
    /// in it too, and the JSON keeps its keys.
    @Test(arguments: TestStoreKind.allCases) func theQueueAndTheLogAreInTheModeratorsLanguage(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            try await client.execute(
                uri: "/api/v1/me", method: .patch, headers: Self.json(carol), body: ByteBuffer(json: #"{"locale": "zh-Hans"}"#)
            ) { #expect($0.status == .ok) }
            let id = try await ReportsTests.post(client, token: ada, title: "Cheap pills")
            let (_, filed, _) = try await ReportsTests.report(client, token: bob, #"{"post_id": \#(id), "reason": "spam"}"#)
            let report = try #require(filed["id"] as? Int)
            try await client.execute(uri: "/moderation", method: .get, headers: cookieHeader(carol)) { response in
                #expect(response.headers[.contentLanguage] == "zh-Hans")
                #expect(response.text.contains("<h1>内容审核</h1>") && response.text.contains("ada 的帖子") && response.text.contains("由 1 人举报：垃圾信息或诈骗 (1)"))
                #expect(response.text.contains(#"value="remove_post" class="destructive">移除帖子</button>"#))
            }
            let (refused, errors) = try await Self.act(client, token: carol, report: report, #"{"action": "explode"}"#)
            #expect(refused == .unprocessableContent)
            #expect(((errors["errors"] as? [String: Any])?["action"] as? [String])?.first?.hasPrefix("必须是以下之一：dismiss") == true, "\(errors)")
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "remove_post"}"#).0 == .ok)
            try await client.execute(uri: "/moderation/audit", method: .get, headers: cookieHeader(carol)) { response in
                #expect(response.text.contains("<h1>审核日志</h1>") && response.text.contains("移除帖子 · ada 的帖子“Cheap pills”"))
            }
            // The same line, read in English by a reader whose browser asks for it.
            try await client.execute(
                uri: "/api/v1/moderation/audit", method: .get, headers: bearer(carol).merging([.acceptLanguage: "en"])
            ) { response in
                let log = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                #expect(log.first?["target"] as? String == "ada 的帖子“Cheap pills”", "the account's language wins")
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aSuspendedAccountIsSignedOutRefusedAndItsPostsHiddenUntilReinstated(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            let id = try await ReportsTests.post(client, token: ada, title: "Mean words")
            let (_, filed, _) = try await ReportsTests.report(client, token: bob, #"{"user_id": 1, "reason": "harassment"}"#)
            let report = try #require(filed["id"] as? Int)
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "remove_post"}"#).0 == .unprocessableContent)
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "suspend_user", "note": "Harassment"}"#).0 == .ok)
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(ada)) { #expect($0.status == .unauthorized) }
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(json: #"{"email": "ada@example.com", "password": "correct horse battery"}"#)
            ) { response in
                #expect(response.status == .forbidden && response.json()["error"] as? String == "account_suspended")
                #expect(response.headers[HTTPField.Name("X-Session-Token")!] == nil)
            }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get, headers: bearer(bob)) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get, headers: bearer(carol)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .get) { #expect($0.headers[.xTotalCount] == "0") }
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "unsuspend"}"#).0 == .ok)
            try await signIn(client, as: .ada)
            try await client.execute(uri: "/api/v1/posts/\(id)", method: .get, headers: bearer(bob)) { #expect($0.status == .ok) }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aRemovedPostIsDeletedAfterThirtyDaysAndCannotBeRestoredThen(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await TermsTests.addCarol(to: harness, as: .moderator)
        let (id, report) = try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            let id = try await ReportsTests.post(client, token: ada, title: "Gone soon")
            let (_, filed, _) = try await ReportsTests.report(client, token: carol, #"{"post_id": \#(id), "reason": "spam"}"#)
            let report = try #require(filed["id"] as? Int)
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "remove_post"}"#).0 == .ok)
            return (id, report)
        }
        let store = try await Store.reopen(harness.store)
        let moderation = store.moderationStorage
        #expect(try await moderation.purgeRemovedPosts(before: Date().addingTimeInterval(-60)).isEmpty, "still restorable")
        #expect(try await moderation.purgeRemovedPosts(before: Date().addingTimeInterval(60)) == [id])
        #expect(try await store.postStorage.find(id: id) == nil)
        try await buildApplication(harness.config, store: store).test(.router) { client in
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            #expect(try await Self.act(client, token: carol, report: report, #"{"action": "restore"}"#).0 == .gone)
        }
    }

    @Test func onlyAdminsGiveRolesAndEveryChangeIsLogged() async throws {
        let harness = try await TestHarness()
        try await TermsTests.addCarol(to: harness)
        let users = UserRepository(store: harness.store)
        _ = try await users.setRole(.moderator, email: TermsTests.carol.email)
        _ = try await users.setRole(.admin, email: TestUser.ada.email)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            let body = ByteBuffer(json: #"{"email": "bob@example.com", "role": "moderator"}"#)
            try await client.execute(uri: "/api/v1/moderation/roles", method: .post, headers: Self.json(carol), body: body) {
                #expect($0.status == .forbidden)
            }
            try await client.execute(
                uri: "/api/v1/moderation/roles", method: .post, headers: Self.json(ada), body: ByteBuffer(json: #"{"email": "bob@example.com", "role": "king"}"#)
            ) { #expect($0.status == .unprocessableContent) }
            try await client.execute(uri: "/api/v1/moderation/roles", method: .post, headers: Self.json(ada), body: body) { response in
                #expect(response.status == .ok && response.json()["role"] as? String == "moderator" && response.json()["id"] as? Int == 2)
            }
            let (bob, _) = try await signIn(client, as: .bob)
            try await client.execute(uri: "/api/v1/moderation/reports", method: .get, headers: bearer(bob)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/moderation/audit", method: .get, headers: cookieHeader(ada)) { response in
                #expect(response.text.contains("Change role") && response.text.contains("role: moderator"))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func theGaugesSayHowManyReportsWaitAndForHowLong(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let users = UserRepository(store: store, passwordHashCost: 4)
        try await users.create(email: TestUser.ada.email, password: TestUser.ada.password)
        try await users.create(email: TestUser.bob.email, password: TestUser.bob.password)
        let metrics = FoyerMetrics()
        let gauges = ModerationGauges(storage: store.moderationStorage, metrics: metrics, logger: Logger(label: "test"))
        try await gauges.update()
        #expect(String(buffer: metrics.exposition()).contains("foyer_moderation_open_reports 0"))
        let filed = Date()
        _ = try await store.reportStorage.file(ReportDraft(reporterId: 2, target: .user(1), reason: .spam, comment: ""), now: filed) { _, _, _ in [] }
        try await gauges.update(now: filed.addingTimeInterval(90))
        let exposition = String(buffer: metrics.exposition())
        #expect(exposition.contains("foyer_moderation_open_reports 1"))
        #expect(exposition.contains("foyer_moderation_oldest_open_report_age_seconds 90"))
    }
}

/// Blocks keep two people apart on every read path, both ways, from the next request on; profiles show a name and posts.
@Suite struct BlocksTests {
    /// The ids of a JSON array of posts; none when the body is not one.
    static func ids(_ response: TestResponse) -> [Int] {
        ((try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? [[String: Any]] ?? []).compactMap { $0["id"] as? Int }
    }

    @Test(arguments: TestStoreKind.allCases) func aBlockKeepsTwoPeopleApartOnEveryReadPathUntilLifted(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        let dee = TestUser(email: "dee@example.com", password: "dee's own words")
        try await UserRepository(store: harness.store, passwordHashCost: 4).create(email: dee.email, password: dee.password, name: "Dee")
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (deeToken, _) = try await signIn(client, as: dee)
            let byAda = Int(try await ReportsTests.post(client, token: ada, title: "Ada writes"))
            let byBob = Int(try await ReportsTests.post(client, token: bob, title: "Bob writes"))
            let byDee = Int(try await ReportsTests.post(client, token: deeToken, title: "Dee writes"))
            // Kept for everyone before the block: the block must not be served from what was kept.
            try await client.execute(uri: "/api/v1/posts/\(byAda)", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .get) { #expect(Self.ids($0) == [byDee, byBob, byAda]) }

            let block = ByteBuffer(json: #"{"user_id": 1}"#)
            try await client.execute(uri: "/api/v1/blocks", method: .post, headers: ModerationQueueTests.json(bob), body: block) { response in
                #expect(response.status == .created && (response.json()["user"] as? [String: Any])?["name"] as? String == "ada")
            }
            try await client.execute(uri: "/api/v1/blocks", method: .post, headers: ModerationQueueTests.json(bob), body: block) { #expect($0.status == .ok) }
            for refused in [#"{"user_id": 2}"#, #"{"user_id": 999}"#, "{}"] {
                try await client.execute(uri: "/api/v1/blocks", method: .post, headers: ModerationQueueTests.json(bob), body: ByteBuffer(json: refused)) {
                    #expect($0.status == .unprocessableContent, "\(refused)")
                }
            }
            // Bob sees nothing of Ada's, and Ada nothing of Bob's; Dee and anyone signed out see all.
            try await client.execute(uri: "/api/v1/posts", method: .get, headers: bearer(bob)) { response in
                #expect(Self.ids(response) == [byDee, byBob] && response.headers[.xTotalCount] == "2")
            }
            try await client.execute(uri: "/api/v1/posts", method: .get, headers: bearer(ada)) { response in
                #expect(Self.ids(response) == [byDee, byAda] && response.headers[.xTotalCount] == "2")
            }
            try await client.execute(uri: "/api/v1/posts", method: .get, headers: bearer(deeToken)) { #expect(Self.ids($0).count == 3) }
            try await client.execute(uri: "/api/v1/posts", method: .get) { #expect(Self.ids($0).count == 3) }
            for (reader, post) in [(bob, byAda), (ada, byBob)] {
                try await client.execute(uri: "/api/v1/posts/\(post)", method: .get, headers: bearer(reader)) { #expect($0.status == .notFound) }
                try await client.execute(uri: "/posts/\(post)", method: .get, headers: cookieHeader(reader)) { #expect($0.status == .notFound) }
            }
            // Each reader's list is kept apart from the others': Bob's is his alone, Dee shares everyone's.
            for _ in 0..<2 {
                try await client.execute(uri: "/posts", method: .get, headers: cookieHeader(bob)) { response in
                    #expect(!response.text.contains("Ada writes") && response.text.contains("Dee writes"))
                }
                try await client.execute(uri: "/posts", method: .get, headers: cookieHeader(deeToken)) { #expect($0.text.contains("Ada writes")) }
            }
            try await client.execute(uri: "/users/1", method: .get, headers: cookieHeader(bob)) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/api/v1/users/2", method: .get, headers: bearer(ada)) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/api/v1/posts/\(byAda)", method: .get, headers: bearer(deeToken)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/blocks", method: .get, headers: bearer(bob)) { response in
                let list = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                #expect(list.count == 1 && (list[0]["user"] as? [String: Any])?["id"] as? Int == 1)
            }
            try await client.execute(uri: "/blocks", method: .get, headers: cookieHeader(bob)) { #expect($0.text.contains("/blocks/1/unblock")) }
            // Lifted, all is as before.
            try await client.execute(uri: "/api/v1/blocks/1", method: .delete, headers: bearer(bob)) { #expect($0.status == .noContent) }
            try await client.execute(uri: "/api/v1/posts", method: .get, headers: bearer(bob)) { #expect(Self.ids($0).count == 3) }
            try await client.execute(uri: "/posts", method: .get, headers: cookieHeader(bob)) { #expect($0.text.contains("Ada writes")) }
            try await client.execute(uri: "/api/v1/posts/\(byAda)", method: .get, headers: bearer(bob)) { #expect($0.status == .ok) }
        }
        // The moderators hear of every block.
        let store = try await Store.reopen(harness.store)
        defer { store.close() }
        let log = try await store.moderationStorage.auditLog(limit: 10)
        #expect(log.map(\.action) == [.blocked] && log[0].moderatorName == "bob" && log[0].target == "the account of ada")
    }

    /// An open list is live: once Bob blocks Ada, his open stream (and hers) loads its list again and is not sent
    /// her new posts, while anyone else's still is; lifted, hers reach him again.
    @Test func aBlockKeepsTheOtherPersonsNewPostsOffOpenPagesAtOnce() async throws {
        let harness = try await TestHarness()
        try await harness.test(.live) { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let list = try await client.execute(uri: "/posts", method: .get, headers: browserHeaders) { $0.text }
            let (port, path) = (try #require(client.port), try LiveStreamTests.streamPath(in: list))
            let (bobs, adas, anyones) = (
                try RawStream(port: port, path: path, headers: ["Authorization: Bearer \(bob)"]),
                try RawStream(port: port, path: path, headers: ["Authorization: Bearer \(ada)"]), try RawStream(port: port, path: path)
            )
            for stream in [bobs, adas, anyones] { _ = try await stream.read(until: ": posts\n") }

            try await client.execute(uri: "/api/v1/blocks", method: .post, headers: ModerationQueueTests.json(bob), body: ByteBuffer(json: #"{"user_id": 1}"#)) {
                #expect($0.status == .created)
            }
            for stream in [bobs, adas] { _ = try await stream.read(until: "data-live-reload>") }
            for (token, title) in [(ada, "Ada after the block"), (bob, "Bob after the block"), (ada, "Ada again"), (bob, "Bob again")] {
                _ = try await ReportsTests.post(client, token: token, title: title)
            }
            #expect(try await anyones.read(until: "Bob again").contains("Ada after the block"))
            let toBob = try await bobs.read(until: "Bob again")
            #expect(toBob.contains("Bob after the block") && !toBob.contains("Ada after the block") && !toBob.contains("Ada again"), "Bob is not sent Ada's posts")
            #expect(!(try await adas.read(until: "Ada again")).contains("Bob after the block"), "nor Ada Bob's")

            try await client.execute(uri: "/api/v1/blocks/1", method: .delete, headers: bearer(bob)) { #expect($0.status == .noContent) }
            _ = try await bobs.read(until: "data-live-reload>")
            _ = try await ReportsTests.post(client, token: ada, title: "Ada once unblocked")
            #expect(try await bobs.read(until: "Ada once unblocked").contains(#"<turbo-stream action="prepend" target="posts">"#))
        }
    }

    @Test func aProfileShowsANameAndPostsButNeverTheAddressAndOffersReportAndBlock() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            _ = try await ReportsTests.post(client, token: ada, title: "Ada writes")
            try await client.execute(uri: "/api/v1/users/1", method: .get) { response in
                let body = response.json()
                #expect(body["name"] as? String == "ada" && (body["posts"] as? [[String: Any]])?.count == 1)
                #expect(!String(buffer: response.body).contains("example.com"))
            }
            try await client.execute(uri: "/users/1", method: .get, headers: browserHeaders) { response in
                #expect(response.text.contains("Ada writes") && !response.text.contains("block-user"))
            }
            try await client.execute(uri: "/users/1", method: .get, headers: cookieHeader(bob)) { response in
                #expect(response.text.contains(#"id="block-user""#) && response.text.contains(#"href="/users/1/report""#))
            }
            try await client.execute(uri: "/users/1", method: .get, headers: cookieHeader(ada)) { #expect(!$0.text.contains("block-user")) }
            try await client.execute(uri: "/users/999", method: .get, headers: browserHeaders) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/users/1/report", method: .get, headers: cookieHeader(bob)) { response in
                #expect(response.status == .ok && response.text.contains("The account of ada"))
            }
            try await client.execute(uri: "/posts/1", method: .get, headers: cookieHeader(bob)) { response in
                #expect(response.text.contains(#"href="/users/1""#) && response.text.contains(#"action="/users/1/block""#))
            }
        }
    }
}

/// What a post passes before it is published: watched words and a new account's pace.
@Suite struct PostingRulesTests {
    @Test func watchedWordsAreWholeWordsInAnyCaseAndABrokenLineStopsStartUp() throws {
        let words = try WatchedWords(parsing: "# the operator's list\nblock: Spamword\nreview: free   money\n\n")
        #expect(words.match("Buy SPAMWORD now")! == (.block, "spamword"))
        #expect(words.match("spamwords are fine") == nil, "whole words only")
        #expect(words.match("Get FREE money!")! == (.review, "free money"))
        #expect(words.match("free, money")! == (.review, "free money"))
        #expect(words.match("free time, money later") == nil)
        #expect(throws: StartupError.self) { try WatchedWords(parsing: "blok: word") }
        #expect(throws: StartupError.self) { try WatchedWords(parsing: "review:") }
    }

    @Test(arguments: TestStoreKind.allCases) func aBlockedWordIsRefusedAndAReviewedOneHoldsThePostForAModerator(kind: TestStoreKind) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-words-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent("words.txt")
        try "block: spamword\nreview: miracle\n".write(to: file, atomically: true, encoding: .utf8)
        let harness = try await TestHarness(kind) { $0.moderation.watchedWordsFile = file.path }
        try await TermsTests.addCarol(to: harness, as: .moderator)
        try await harness.test { client in
            let (ada, _) = try await signIn(client, as: .ada)
            let (bob, _) = try await signIn(client, as: .bob)
            let (carol, _) = try await signIn(client, as: TermsTests.carol)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: ModerationQueueTests.json(ada),
                body: ByteBuffer(json: #"{"title": "Hello", "content": "Buy SpamWord today"}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect((response.json()["errors"] as? [String: [String]])?["content"]?.first?.contains("spamword") == true)
            }
            let held = try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: ModerationQueueTests.json(ada),
                body: ByteBuffer(json: #"{"title": "A miracle cure", "content": "Trust me"}"#)
            ) { response in
                #expect(response.status == .created)
                return try #require(response.json()["id"] as? Int)
            }
            try await client.execute(uri: "/api/v1/posts/\(held)", method: .get, headers: bearer(bob)) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/api/v1/posts/\(held)", method: .get, headers: bearer(ada)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/v1/posts", method: .get) { #expect($0.headers[.xTotalCount] == "0") }
            let report = try await client.execute(uri: "/api/v1/moderation/reports", method: .get, headers: bearer(carol)) { response in
                let reports = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                #expect(reports.count == 1 && reports[0]["post_state"] as? String == "held" && reports[0]["reporter"] is NSNull)
                return try #require(reports[0]["id"] as? Int)
            }
            #expect(try await ModerationQueueTests.act(client, token: carol, report: report, #"{"action": "approve"}"#).0 == .ok)
            try await client.execute(uri: "/api/v1/posts/\(held)", method: .get, headers: bearer(bob)) { #expect($0.status == .ok) }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func anAccountYoungerThanADayWritesFivePostsAnHourUnlessVouchedFor(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let body = #"{"name": "Newcomer", "email": "new@example.com", "password": "brand new words here", "accept_terms": true}"#
            let token = try await client.execute(
                uri: "/api/v1/users", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(json: body)
            ) { try #require($0.headers[.xSessionToken]) }
            for number in 1...5 { _ = try await ReportsTests.post(client, token: token, title: "Post \(number)") }
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: ModerationQueueTests.json(token), body: ByteBuffer(json: #"{"title": "Sixth"}"#)
            ) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[.retryAfter].flatMap { Int($0) }.map { $0 > 3500 && $0 <= 3600 } == true)
            }
            // Ada was made by the operator: no new-account limit holds her.
            let (ada, _) = try await signIn(client, as: .ada)
            for number in 1...6 { _ = try await ReportsTests.post(client, token: ada, title: "Ada \(number)") }
        }
    }
}
