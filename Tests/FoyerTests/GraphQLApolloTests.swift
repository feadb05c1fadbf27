import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

/// What Apollo clients turn on in production: automatic persisted queries, trusted documents, batching; and the
/// introspection switch.
@Suite struct GraphQLApolloTests {
    static let allTasks = "query AllTasks { allTasks { id title } }"
    static let createTask = "mutation Create($title: String!) { createTask(title: $title, description: \"From a test\") { id title } }"

    static func sha256(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    static func persisted(_ hash: String) -> [String: Any] {
        ["persistedQuery": ["version": 1, "sha256Hash": hash]]
    }

    /// POSTs `body` (any JSON) to /graphql; the status, the headers and the decoded JSON.
    static func post(_ client: some TestClientProtocol, token: String, _ body: Any) async throws -> (HTTPResponse.Status, HTTPFields, Any) {
        let data = try JSONSerialization.data(withJSONObject: body)
        return try await client.execute(uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(bytes: data)) { response in
            (response.status, response.headers, try JSONSerialization.jsonObject(with: Data(buffer: response.body)))
        }
    }

    static func get(_ client: some TestClientProtocol, token: String, _ parameters: [String: String]) async throws -> (HTTPResponse.Status, HTTPFields, [String: Any]) {
        var components = URLComponents()
        components.path = "/graphql"
        components.queryItems = parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        // `+` is a space in a query string; URLComponents leaves it alone.
        let uri = components.url!.absoluteString.replacingOccurrences(of: "+", with: "%2B")
        return try await client.execute(uri: uri, method: .get, headers: bearer(token)) { response in
            (response.status, response.headers, response.json())
        }
    }

    static func code(_ reply: Any) -> String? {
        (((reply as? [String: Any])?["errors"] as? [[String: Any]])?.first?["extensions"] as? [String: Any])?["code"] as? String
    }

    static func json(_ object: Any) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    @Test(arguments: TestStoreKind.allCases) func aHashAloneIsAskedForItsQueryThenRuns(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let hash = Self.sha256(Self.allTasks)

            let (missStatus, missHeaders, miss) = try await Self.post(client, token: token, ["extensions": Self.persisted(hash)])
            #expect(missStatus == .ok, "Apollo clients send the query when they read this, so it is not an HTTP error")
            #expect(Self.code(miss) == "PERSISTED_QUERY_NOT_FOUND")
            #expect(((miss as? [String: Any])?["errors"] as? [[String: Any]])?.first?["message"] as? String == "PersistedQueryNotFound")
            #expect(missHeaders[.cacheControl]?.contains("no-cache") == true)

            let (registerStatus, _, registered) = try await Self.post(client, token: token, ["query": Self.allTasks, "extensions": Self.persisted(hash)])
            #expect(registerStatus == .ok)
            #expect(((registered as? [String: Any])?["data"] as? [String: Any])?["allTasks"] is [Any], "\(registered)")

            let (hitStatus, _, hit) = try await Self.post(client, token: token, ["extensions": Self.persisted(hash), "operationName": "AllTasks"])
            #expect(hitStatus == .ok)
            #expect(((hit as? [String: Any])?["data"] as? [String: Any])?["allTasks"] is [Any], "\(hit)")

            // GET, as Apollo clients send queries when told to use GET for hashed queries.
            let (getStatus, _, got) = try await Self.get(client, token: token, ["extensions": try Self.json(Self.persisted(hash))])
            #expect(getStatus == .ok)
            #expect((got["data"] as? [String: Any])?["allTasks"] is [Any], "\(got)")

            try await client.execute(uri: "/metrics", method: .get) { response in
                let text = String(buffer: response.body)
                #expect(text.contains(#"foyer_graphql_persisted_queries_total{outcome="miss"} 1"#))
                #expect(text.contains(#"foyer_graphql_persisted_queries_total{outcome="registered"} 1"#))
            }
        }
    }

    @Test func aHashThatIsNotTheQuerysIsRefusedAndNothingIsRegistered() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let wrong = Self.sha256("{ somethingElse }")
            let (status, _, reply) = try await Self.post(client, token: token, ["query": Self.allTasks, "extensions": Self.persisted(wrong)])
            #expect(status == .badRequest)
            #expect(Self.code(reply) == "PERSISTED_QUERY_HASH_MISMATCH")
            let (_, _, after) = try await Self.post(client, token: token, ["extensions": Self.persisted(wrong)])
            #expect(Self.code(after) == "PERSISTED_QUERY_NOT_FOUND")

            let (badHash, _, badHashReply) = try await Self.post(client, token: token, ["extensions": Self.persisted("not-a-hash")])
            #expect(badHash == .badRequest)
            #expect(Self.code(badHashReply) == "BAD_REQUEST")
            let (badVersion, _, versionReply) = try await Self.post(
                client, token: token, ["extensions": ["persistedQuery": ["version": 2, "sha256Hash": wrong]]]
            )
            #expect(badVersion == .badRequest)
            #expect(Self.code(versionReply) == "PERSISTED_QUERY_VERSION_NOT_SUPPORTED")
        }
    }

    @Test func aPersistedMutationIsRefusedOverGET() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let hash = Self.sha256(Self.createTask)
            let (status, _, created) = try await Self.post(
                client, token: token, ["query": Self.createTask, "variables": ["title": "Over POST"], "extensions": Self.persisted(hash)]
            )
            #expect(status == .ok, "\(created)")
            let (getStatus, headers, refused) = try await Self.get(
                client, token: token, ["extensions": try Self.json(Self.persisted(hash)), "variables": #"{"title":"Over GET"}"#]
            )
            #expect(getStatus == .methodNotAllowed)
            #expect(headers[.allow] == "POST")
            #expect(Self.code(refused) == "METHOD_NOT_ALLOWED")
            let (_, _, all) = try await Self.post(client, token: token, ["query": Self.allTasks])
            let titles = ((((all as? [String: Any])?["data"] as? [String: Any])?["allTasks"]) as? [[String: Any]])?.compactMap { $0["title"] as? String }
            #expect(titles == ["Over POST"])
        }
    }

    @Test(arguments: TestStoreKind.allCases) func anotherInstanceOnTheSameStoreKnowsTheHash(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        let hash = Self.sha256(Self.allTasks)
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            _ = try await Self.post(client, token: token, ["query": Self.allTasks, "extensions": Self.persisted(hash)])
        }
        let second = try await buildApplication(harness.config, store: try await Store.reopen(harness.store))
        try await second.test(.router) { client in
            let (token, _) = try await signIn(client)
            let (status, _, reply) = try await Self.post(client, token: token, ["extensions": Self.persisted(hash)])
            #expect(status == .ok)
            #expect(((reply as? [String: Any])?["data"] as? [String: Any])?["allTasks"] is [Any], "\(reply)")
        }
    }

    @Test(arguments: TestStoreKind.allCases) func theStoreKeepsItsBoundOfDocumentsDroppingTheLongestUnused(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let storage = store.persistedDocumentStorage
        let start = Date()
        func second(_ number: Int) -> Date { start.addingTimeInterval(Double(number)) }
        for number in 0..<3 {
            try await storage.keep("{ n\(number) }", hash: "h\(number)", at: second(number), keepingAtMost: 3)
        }
        // The first registered is used again, so h1 and then h2 are the longest unused when two more arrive.
        #expect(try await storage.document(hash: "h0", usedAt: second(3)) == "{ n0 }")
        try await storage.keep("{ n3 }", hash: "h3", at: second(4), keepingAtMost: 3)
        try await storage.keep("{ n4 }", hash: "h4", at: second(5), keepingAtMost: 3)
        var kept: [String: String] = [:]
        for number in 0..<5 {
            kept["h\(number)"] = try await storage.document(hash: "h\(number)", usedAt: second(6))
        }
        #expect(kept == ["h0": "{ n0 }", "h3": "{ n3 }", "h4": "{ n4 }"])
    }

    @Test func aBatchAnswersAnArrayInOrderAndMutationsRunInOrder() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let (status, _, reply) = try await Self.post(client, token: token, [
                ["query": Self.createTask, "variables": ["title": "First"]],
                ["query": Self.createTask, "variables": ["title": "Second"]],
                ["query": "{ noSuchField }"],
                ["query": Self.allTasks],
            ])
            #expect(status == .ok)
            let results = try #require(reply as? [[String: Any]], "\(reply)")
            #expect(results.count == 4)
            #expect(((results[0]["data"] as? [String: Any])?["createTask"] as? [String: Any])?["title"] as? String == "First")
            #expect(((results[1]["data"] as? [String: Any])?["createTask"] as? [String: Any])?["title"] as? String == "Second")
            #expect((results[2]["errors"] as? [Any])?.isEmpty == false, "the failing one fails alone")
            let titles = ((results[3]["data"] as? [String: Any])?["allTasks"] as? [[String: Any]])?.compactMap { $0["title"] as? String }
            #expect(titles == ["First", "Second"], "a query after mutations sees them")
        }
    }

    @Test func aBatchAppliesLimitsPerOperationAndToItsSize() async throws {
        let harness = try await TestHarness { $0.graphQLBatchLimit = 3 }
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let deep = "{ " + String(repeating: "a { ", count: 20) + "b" + String(repeating: " }", count: 20) + " }"
            let (status, _, reply) = try await Self.post(client, token: token, [
                ["query": Self.allTasks], ["query": deep], ["extensions": Self.persisted(Self.sha256("{ unknown }"))],
            ])
            #expect(status == .ok)
            let results = try #require(reply as? [Any])
            #expect(((results[0] as? [String: Any])?["data"] as? [String: Any])?["allTasks"] is [Any])
            #expect(Self.code(results[1]) == "QUERY_TOO_COMPLEX")
            #expect(Self.code(results[2]) == "PERSISTED_QUERY_NOT_FOUND")

            let (tooMany, _, refused) = try await Self.post(client, token: token, Array(repeating: ["query": Self.allTasks], count: 4))
            #expect(tooMany == .badRequest)
            #expect(Self.code(refused) == "BATCH_TOO_LARGE")
            let (empty, _, emptyReply) = try await Self.post(client, token: token, [Any]())
            #expect(empty == .badRequest)
            #expect(Self.code(emptyReply) == "BAD_REQUEST")
        }
    }

    @Test func withTrustedDocumentsOnlyTheManifestsOperationsRun() async throws {
        let listedByBody = "query Listed { allTasks { id } }"
        let listedByID = "query ByID { allTasks { title } }"
        let manifest: [String: Any] = [
            "format": "apollo-persisted-query-manifest", "version": 1,
            "operations": [
                ["id": Self.sha256(listedByBody), "name": "Listed", "type": "query", "body": listedByBody],
                ["id": "by-id-1", "name": "ByID", "type": "query", "body": listedByID],
            ],
        ]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("manifest-\(UUID().uuidString).json")
        try JSONSerialization.data(withJSONObject: manifest).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let harness = try await TestHarness { $0.graphQLTrustedDocumentsFile = file.path }
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let (byBody, _, bodyReply) = try await Self.post(client, token: token, ["query": listedByBody])
            #expect(byBody == .ok)
            #expect(((bodyReply as? [String: Any])?["data"] as? [String: Any])?["allTasks"] is [Any], "\(bodyReply)")
            let (byID, _, idReply) = try await Self.post(client, token: token, ["extensions": Self.persisted(Self.sha256(listedByBody))])
            #expect(byID == .ok, "\(idReply)")
            let (byOwnID, _, ownIDReply) = try await Self.get(
                client, token: token, ["extensions": #"{"persistedQuery":{"version":1,"sha256Hash":"by-id-1"}}"#]
            )
            #expect(byOwnID == .ok, "a manifest's ids need not be hashes: \(ownIDReply)")

            let (unlisted, _, unlistedReply) = try await Self.post(client, token: token, ["query": "{ allTasks { status } }"])
            #expect(unlisted == .badRequest)
            #expect(Self.code(unlistedReply) == "QUERY_NOT_IN_SAFELIST")
            let unknownHash = Self.sha256("{ allTasks { status } }")
            let (unknown, _, unknownReply) = try await Self.post(client, token: token, ["extensions": Self.persisted(unknownHash)])
            #expect(unknown == .badRequest)
            #expect(Self.code(unknownReply) == "PERSISTED_QUERY_NOT_IN_LIST")
            let (register, _, registerReply) = try await Self.post(
                client, token: token, ["query": "{ allTasks { status } }", "extensions": Self.persisted(unknownHash)]
            )
            #expect(register == .badRequest, "APQ registers nothing new while only trusted documents run")
            #expect(Self.code(registerReply) == "QUERY_NOT_IN_SAFELIST")

            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(String(buffer: response.body).contains(#"foyer_graphql_refusals_total{reason="untrusted"} 3"#))
            }
            // The task pages' own operations are Foyer's, not a client's: they still run.
            try await client.execute(uri: "/tasks", method: .get, headers: bearer(token)) { #expect($0.status == .ok) }
        }
    }

    @Test func aManifestThatCannotBeReadStopsStartUp() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("manifest-\(UUID().uuidString).json")
        try Data(#"{"format":"something-else","version":1,"operations":[]}"#.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        for path in [file.path, "/nonexistent/manifest.json"] {
            let harness = try await TestHarness { $0.graphQLTrustedDocumentsFile = path }
            await #expect(throws: StartupError.self) { try await buildApplication(harness.config, store: harness.store) }
        }
    }

    @Test func aGETWithTheCookieFromAnotherSiteIsRefused() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (cookie, _) = try await browserSession(client)
            let uri = "/graphql?query=%7B%20allTasks%20%7B%20id%20%7D%20%7D"
            try await client.execute(uri: uri, method: .get, headers: cookie) { response in
                #expect(response.status == .ok, "same site: a query runs")
            }
            var crossSite = cookie
            crossSite[.origin] = "https://elsewhere.example"
            try await client.execute(uri: uri, method: .get, headers: crossSite) { response in
                #expect(response.status == .forbidden)
                #expect(Self.code(response.json() as [String: Any]) == "CROSS_SITE_REQUEST")
            }
        }
    }

    @Test func introspectionCanBeTurnedOff() async throws {
        let harness = try await TestHarness { $0.graphQLIntrospection = false }
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            for query in ["{ __schema { types { name } } }", "{ __type(name: \"Task\") { name } }", "fragment F on Query { __schema { queryType { name } } } { ...F }"] {
                let (status, _, reply) = try await Self.post(client, token: token, ["query": query])
                #expect(status == .badRequest, "\(query)")
                #expect(Self.code(reply) == "INTROSPECTION_DISABLED")
            }
            let (status, _, reply) = try await Self.post(client, token: token, ["query": "{ __typename allTasks { id } }"])
            #expect(status == .ok, "__typename is not introspection: \(reply)")
        }
        let open = try await TestHarness()
        try await open.test { client in
            let (token, _) = try await signIn(client)
            let (status, _, _) = try await Self.post(client, token: token, ["query": "{ __schema { queryType { name } } }"])
            #expect(status == .ok, "on by default")
        }
    }
}
