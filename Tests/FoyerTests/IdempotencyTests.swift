import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import Foyer

/// The idempotency store on its own, on SQLite and PostgreSQL; "another instance" is a second pool on the same tables.
@Suite struct IdempotencyStoreTests {
    struct Setup {
        let keys: IdempotencyKeys
        let other: IdempotencyKeys
        let ada: Int64
        let bob: Int64
    }

    func setup(_ kind: TestStoreKind) async throws -> Setup {
        let store = try await Store.fresh(kind)
        let users = UserRepository(store: store, passwordHashCost: 4)
        let ada = try await users.create(email: "ada@example.com", password: "correct horse battery")
        let bob = try await users.create(email: "bob@example.com", password: "staple of bob's")
        return Setup(keys: IdempotencyKeys(store: store), other: IdempotencyKeys(store: try await Store.reopen(store)), ada: try #require(ada.id), bob: try #require(bob.id))
    }

    /// A run that counts itself and answers `201` with its count.
    final class Handler: Sendable {
        let runs = NIOLockedValueBox(0)
        var count: Int { runs.withLockedValue { $0 } }

        func run(status: HTTPResponse.Status = .created, retryAfter: String? = nil) -> Response {
            let number = runs.withLockedValue { runs in
                runs += 1
                return runs
            }
            var headers: HTTPFields = [.contentType: "application/json", .location: "/api/v1/posts/\(number)"]
            if let retryAfter { headers[.retryAfter] = retryAfter }
            return Response(
                status: status, headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"id":\#(number)}"#))
            )
        }
    }

    func body(_ response: Response) async throws -> String {
        String(buffer: try await response.body.collected())
    }

    @Test(arguments: TestStoreKind.allCases) func theFirstAnswerIsReplayedOnEveryInstance(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let handler = Handler()
        let first = try await setup.keys.respond(key: "k-1", caller: setup.ada, fingerprint: "f") { handler.run() }
        #expect(first.status == .created)
        #expect(first.headers[.idempotentReplayed] == nil)
        #expect(try await body(first) == #"{"id":1}"#)

        for keys in [setup.keys, setup.other] {
            let again = try await keys.respond(key: "k-1", caller: setup.ada, fingerprint: "f") { handler.run() }
            #expect(again.status == .created)
            #expect(again.headers[.idempotentReplayed] == "true")
            #expect(again.headers[.location] == "/api/v1/posts/1")
            #expect(again.headers[.contentType] == "application/json")
            #expect(try await body(again) == #"{"id":1}"#)
        }
        #expect(handler.count == 1)

        // Keys are the caller's own: Bob's request under Ada's key runs, and is his.
        let bobs = try await setup.other.respond(key: "k-1", caller: setup.bob, fingerprint: "f") { handler.run() }
        #expect(try await body(bobs) == #"{"id":2}"#)
        #expect(bobs.headers[.idempotentReplayed] == nil)
    }

    @Test(arguments: TestStoreKind.allCases) func theSameKeyWithAnotherRequestIsRefused(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let handler = Handler()
        _ = try await setup.keys.respond(key: "k-2", caller: setup.ada, fingerprint: "first") { handler.run() }
        let refusal = await #expect(throws: IdempotencyRefusal.self) {
            try await setup.other.respond(key: "k-2", caller: setup.ada, fingerprint: "second") { handler.run() }
        }
        #expect(refusal?.status == .unprocessableContent)
        #expect(refusal?.code == "IDEMPOTENCY_KEY_REUSED")
        #expect(handler.count == 1)
    }

    @Test(arguments: TestStoreKind.allCases) func aKeyWhoseFirstRequestRunsIsInUseOnEveryInstance(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let (started, release) = (AsyncStream<Void>.makeStream(), AsyncStream<Void>.makeStream())
        async let first = setup.keys.respond(key: "k-3", caller: setup.ada, fingerprint: "f") {
            started.continuation.yield()
            for await _ in release.stream { break }
            return Handler().run()
        }
        for await _ in started.stream { break }
        let refusal = await #expect(throws: IdempotencyRefusal.self) {
            try await setup.other.respond(key: "k-3", caller: setup.ada, fingerprint: "f") { Handler().run() }
        }
        #expect(refusal?.status == .conflict)
        #expect(refusal?.code == "IDEMPOTENCY_KEY_IN_USE")
        #expect(refusal?.headers[.retryAfter] == "1")
        release.continuation.yield()
        #expect(try await first.status == .created)
        let replayed = try await setup.other.respond(key: "k-3", caller: setup.ada, fingerprint: "f") { Handler().run() }
        #expect(replayed.headers[.idempotentReplayed] == "true")
    }

    @Test(arguments: TestStoreKind.allCases) func aKeptAnswerLivesTwentyFourHours(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let handler = Handler()
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        _ = try await setup.keys.respond(key: "k-4", caller: setup.ada, fingerprint: "f", now: start) { handler.run() }
        let justBefore = start.addingTimeInterval(IdempotencyKeys.lifetime - 1)
        _ = try await setup.other.respond(key: "k-4", caller: setup.ada, fingerprint: "f", now: justBefore) { handler.run() }
        #expect(handler.count == 1)
        #expect(try await setup.keys.prune(now: justBefore) == 0)

        let expired = start.addingTimeInterval(IdempotencyKeys.lifetime)
        #expect(try await setup.keys.prune(now: expired) == 1)
        // Expired (and pruned, or not yet): the key is free, even for another request.
        let again = try await setup.other.respond(key: "k-4", caller: setup.ada, fingerprint: "other", now: expired) { handler.run() }
        #expect(again.headers[.idempotentReplayed] == nil)
        #expect(handler.count == 2)
    }

    @Test(arguments: TestStoreKind.allCases) func anAnswerARetryMayNotMeetAgainReleasesTheKey(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let handler = Handler()
        for status: HTTPResponse.Status in [.internalServerError, .badGateway, .tooManyRequests, .requestTimeout] {
            _ = try await setup.keys.respond(key: "k-5", caller: setup.ada, fingerprint: "f") { handler.run(status: status) }
        }
        // A 409 that says to come back (something still busy), unlike a conflict of versions.
        _ = try await setup.keys.respond(key: "k-5", caller: setup.ada, fingerprint: "f") { handler.run(status: .conflict, retryAfter: "1") }
        struct Failed: Error {}
        await #expect(throws: Failed.self) { try await setup.keys.respond(key: "k-5", caller: setup.ada, fingerprint: "f") { throw Failed() } }
        #expect(handler.count == 5)
        // A refusal the same request would meet again is kept: a validation error, a missing page.
        let invalid = try await setup.keys.respond(key: "k-5", caller: setup.ada, fingerprint: "f") { handler.run(status: .unprocessableContent) }
        #expect(invalid.status == .unprocessableContent)
        _ = try await setup.keys.respond(key: "k-5", caller: setup.ada, fingerprint: "f") { handler.run() }
        #expect(handler.count == 6)
    }

    /// A write judged stale (409 without Retry-After, or 412) is judged once: its replay is that judgement, even
    /// after the version it was refused for is gone too.
    @Test(arguments: TestStoreKind.allCases) func aConflictOfVersionsIsKeptAndReplayed(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let handler = Handler()
        for (key, status) in [("k-409", HTTPResponse.Status.conflict), ("k-412", .preconditionFailed)] {
            let first = try await setup.keys.respond(key: key, caller: setup.ada, fingerprint: "f") { handler.run(status: status) }
            let again = try await setup.keys.respond(key: key, caller: setup.ada, fingerprint: "f") { handler.run() }
            #expect(first.status == status)
            #expect(again.status == status)
            #expect(again.headers[.idempotentReplayed] == "true")
        }
        #expect(handler.count == 2)
    }

    @Test(arguments: TestStoreKind.allCases) func aFirstRequestThatNeverAnsweredIsTakenOverAfterTwoMinutes(kind: TestStoreKind) async throws {
        let setup = try await setup(kind)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        // Claimed by an instance that then died: no answer ever comes.
        #expect(try await setup.keys.storage.claim(caller: setup.ada, key: "k-6", fingerprint: "f", now: start) == .claimed)
        let stillRunning = start.addingTimeInterval(IdempotencyKeys.abandonedAfter - 1)
        #expect(try await setup.other.storage.claim(caller: setup.ada, key: "k-6", fingerprint: "f", now: stillRunning) == .running)
        let abandoned = start.addingTimeInterval(IdempotencyKeys.abandonedAfter)
        #expect(try await setup.other.storage.claim(caller: setup.ada, key: "k-6", fingerprint: "f", now: abandoned) == .claimed)
    }

    @Test func answersCarryingACredentialAreNeverKept() {
        var signIn = Response(status: .created, headers: [.xSessionToken: "secret"])
        #expect(!IdempotencyKeys.isKeepable(signIn))
        signIn = Response(status: .seeOther, headers: [.setCookie: "\(SessionCookie.name)=secret; Path=/"])
        #expect(!IdempotencyKeys.isKeepable(signIn))
        #expect(IdempotencyKeys.isKeepable(Response(status: .seeOther, headers: [.setCookie: "foyer_flash=created; Path=/"])))
    }
}

/// `Idempotency-Key` on the routes: the posts API, forms, `/graphql` mutations; and what signing out clears.
@Suite struct IdempotencyRouteTests {
    func createPost(_ client: some TestClientProtocol, token: String, key: String?, title: String) async throws -> TestResponse {
        var headers = bearer(token).merging(jsonHeaders)
        if let key { headers[.idempotencyKey] = key }
        let body = try JSONSerialization.data(withJSONObject: ["title": title, "content": "Sent once, whatever the network did."], options: .sortedKeys)
        return try await client.execute(uri: "/api/v1/posts", method: .post, headers: headers, body: ByteBuffer(bytes: body)) { $0 }
    }

    func postCount(_ client: some TestClientProtocol) async throws -> Int {
        try await client.execute(uri: "/api/v1/posts", method: .get) { Int($0.headers[HTTPField.Name("X-Total-Count")!] ?? "") ?? -1 }
    }

    @Test func aPostSentTwiceWithOneKeyIsStoredOnce() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            let (bob, _) = try await signIn(client, as: .bob)
            let first = try await createPost(client, token: ada, key: "post-1", title: "Once")
            let again = try await createPost(client, token: ada, key: "post-1", title: "Once")
            #expect(first.status == .created)
            #expect(again.status == .created, "\(again.text)")
            #expect(again.headers[.idempotentReplayed] == "true")
            #expect(first.json()["id"] as? Int == again.json()["id"] as? Int)
            #expect(try await postCount(client) == 1)

            let other = try await createPost(client, token: ada, key: "post-1", title: "Something else")
            #expect(other.status == .unprocessableContent)
            #expect((other.json()["error"] as? String)?.contains("already used for a different request") == true)

            // Bob's key of the same name is his own.
            #expect(try await createPost(client, token: bob, key: "post-1", title: "Once").headers[.idempotentReplayed] == nil)
            // No key: every request is its own.
            _ = try await createPost(client, token: ada, key: nil, title: "Once")
            #expect(try await postCount(client) == 3)
        }
    }

    @Test func aKeyIsOneToTwoHundredFiftyFiveCharacters() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            #expect(try await createPost(client, token: ada, key: String(repeating: "k", count: 255), title: "Longest key").status == .created)
            let tooLong = try await createPost(client, token: ada, key: String(repeating: "k", count: 256), title: "Too long")
            #expect(tooLong.status == .badRequest)
            #expect((tooLong.json()["error"] as? String)?.contains("256 characters") == true)
            #expect(try await createPost(client, token: ada, key: "", title: "Empty").status == .badRequest)
            #expect(try await createPost(client, token: ada, key: "k", title: "Shortest key").status == .created)
            #expect(try await postCount(client) == 2)
        }
    }

    @Test func aGraphQLMutationRunsOncePerKeyAndAQueryIsNeverKept() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            func send(_ query: String, key: String) async throws -> TestResponse {
                var headers = bearer(ada).merging(jsonHeaders)
                headers[.idempotencyKey] = key
                let body = try JSONSerialization.data(withJSONObject: ["query": query])
                return try await client.execute(uri: "/graphql", method: .post, headers: headers, body: ByteBuffer(bytes: body)) { $0 }
            }
            let list = "{ allTasks { title } }"
            #expect(String(buffer: try await send(list, key: "q").body) == #"{"data":{"allTasks":[]}}"#)
            let create = #"mutation { createTask(title: "Once", description: "d") { id title } }"#
            let first = try await send(create, key: "m")
            let again = try await send(create, key: "m")
            #expect(again.headers[.idempotentReplayed] == "true")
            #expect(String(buffer: again.body) == String(buffer: first.body))
            // The query under its key reads what is there now.
            #expect(String(buffer: try await send(list, key: "q").body) == #"{"data":{"allTasks":[{"title":"Once"}]}}"#)

            let reused = try await send(#"mutation { createTask(title: "Twice", description: "d") { id } }"#, key: "m")
            #expect(reused.status == .unprocessableContent)
            let error = try #require((reused.json()["errors"] as? [[String: Any]])?.first)
            #expect((error["extensions"] as? [String: Any])?["code"] as? String == "IDEMPOTENCY_KEY_REUSED")
            #expect(try await send(create, key: "").status == .badRequest)
        }
    }

    @Test func signingOutClearsWhatTheBrowserKept() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (ada, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/sessions/current", method: .delete, headers: bearer(ada)) { response in
                #expect(response.status == .noContent)
                #expect(response.headers[.clearSiteData] == #""cache", "storage""#)
            }
            let (headers, csrf) = try await browserSession(client)
            try await client.execute(uri: "/sign_out", method: .post, headers: headers, body: formBody([("authenticity_token", csrf)])) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.clearSiteData] == #""cache", "storage""#)
            }
        }
    }
}
