import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// Runs a GraphQL request through /graphql with a Bearer token; returns the status and the decoded JSON.
func graphQL(
    _ client: some TestClientProtocol, token: String, _ query: String, variables: [String: Any] = [:]
) async throws -> (HTTPResponse.Status, [String: Any]) {
    let body = try JSONSerialization.data(withJSONObject: ["query": query, "variables": variables])
    return try await client.execute(
        uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(bytes: body)
    ) { response in (response.status, response.json()) }
}

@Suite struct EmbeddedTaskServiceTests {
    static let fields = "id version title description status"

    func create(_ client: some TestClientProtocol, _ token: String, title: String, status: String? = nil) async throws -> [String: Any] {
        let (httpStatus, reply) = try await graphQL(
            client, token: token,
            "mutation($title: String!, $description: String!, $status: TaskStatus) { createTask(title: $title, description: $description, status: $status) { \(Self.fields) } }",
            variables: ["title": title, "description": "About \(title)", "status": status as Any? ?? NSNull()]
        )
        #expect(httpStatus == .ok)
        return try #require((reply["data"] as? [String: Any])?["createTask"] as? [String: Any], "\(reply)")
    }

    @Test func createGetAndPageThroughTasks() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let first = try await create(client, token, title: "First")
            #expect(first["version"] as? Int == 1)
            #expect(first["status"] as? String == "OPEN")
            #expect(first["id"] is String)
            for number in 2...5 { _ = try await create(client, token, title: "Task \(number)", status: "ASSIGNED") }

            let (_, page) = try await graphQL(client, token: token, "{ allTasks(first: 2, after: \"1\") { title status } }")
            let tasks = try #require((page["data"] as? [String: Any])?["allTasks"] as? [[String: Any]])
            #expect(tasks.map { $0["title"] as? String } == ["Task 2", "Task 3"])
            #expect(tasks.map { $0["status"] as? String } == ["ASSIGNED", "ASSIGNED"])

            let (_, all) = try await graphQL(client, token: token, "{ allTasks { id } }")
            #expect(((all["data"] as? [String: Any])?["allTasks"] as? [Any])?.count == 5)

            let (_, got) = try await graphQL(client, token: token, "query($id: ID!) { getTask(id: $id) { title description } }", variables: ["id": first["id"]!])
            #expect((got["data"] as? [String: Any])?["getTask"] as? [String: String] == ["title": "First", "description": "About First"])

            let (_, missing) = try await graphQL(client, token: token, "{ getTask(id: \"999\") { title } }")
            #expect((missing["data"] as? [String: Any])?["getTask"] is NSNull)
        }
    }

    @Test func updateBumpsTheVersionAndAStaleVersionIsAnOffixConflict() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let task = try await create(client, token, title: "Versioned")
            let id = try #require(task["id"] as? String)
            let update = "mutation($id: ID!, $version: Int!, $title: String, $status: TaskStatus) { updateTask(id: $id, version: $version, title: $title, status: $status) { \(Self.fields) } }"

            let (_, updated) = try await graphQL(client, token: token, update, variables: ["id": id, "version": 1, "title": "Renamed", "status": "COMPLETE"])
            let after = try #require((updated["data"] as? [String: Any])?["updateTask"] as? [String: Any])
            #expect(after["version"] as? Int == 2)
            #expect(after["title"] as? String == "Renamed")
            #expect(after["description"] as? String == "About Versioned", "absent arguments stay as they are")
            #expect(after["status"] as? String == "COMPLETE")

            let (status, conflict) = try await graphQL(client, token: token, update, variables: ["id": id, "version": 1, "title": "Stale edit"])
            #expect(status == .ok)
            let error = try #require((conflict["errors"] as? [[String: Any]])?.first)
            #expect(error["message"] as? String == "OffixConflict")
            #expect(error["path"] as? [String] == ["updateTask"])
            let info = try #require(((error["extensions"] as? [String: Any])?["exception"] as? [String: Any])?["conflictInfo"] as? [String: Any])
            let server = try #require(info["serverState"] as? [String: Any])
            #expect(server["version"] as? Int == 2)
            #expect(server["title"] as? String == "Renamed")
            let clientState = try #require(info["clientState"] as? [String: Any])
            #expect(clientState["title"] as? String == "Stale edit")
            #expect(clientState["version"] as? Int == 1)

            let (_, kept) = try await graphQL(client, token: token, "query($id: ID!) { getTask(id: $id) { title version } }", variables: ["id": id])
            let stored = try #require((kept["data"] as? [String: Any])?["getTask"] as? [String: Any])
            #expect(stored["title"] as? String == "Renamed", "the stale edit changed nothing")
            #expect(stored["version"] as? Int == 2)
        }
    }

    @Test func deleteAnswersTheIDOnceThenNull() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let id = try #require(try await create(client, token, title: "Doomed")["id"] as? String)
            let delete = "mutation($id: ID!) { deleteTask(id: $id) }"
            let (_, deleted) = try await graphQL(client, token: token, delete, variables: ["id": id])
            #expect((deleted["data"] as? [String: Any])?["deleteTask"] as? String == id)
            let (_, again) = try await graphQL(client, token: token, delete, variables: ["id": id])
            #expect((again["data"] as? [String: Any])?["deleteTask"] is NSNull)
        }
    }

    @Test func invalidQueriesAreGraphQLErrors() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let (syntaxStatus, syntax) = try await graphQL(client, token: token, "{ allTasks { ")
            #expect(syntaxStatus == .badRequest)
            #expect((syntax["errors"] as? [[String: Any]])?.isEmpty == false)
            let (unknownStatus, unknown) = try await graphQL(client, token: token, "{ findTasks { id } }")
            #expect(unknownStatus == .badRequest)
            #expect(((unknown["errors"] as? [[String: Any]])?.first?["message"] as? String)?.contains("findTasks") == true)
            let (_, badOffset) = try await graphQL(client, token: token, "{ allTasks(after: \"soon\") { id } }")
            #expect(((badOffset["errors"] as? [[String: Any]])?.first?["message"] as? String)?.contains("numeric offset") == true)
        }
    }
}

@Suite struct GraphQLProxyTests {
    @Test func needsASignedInUser() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/graphql", method: .post, headers: jsonHeaders, body: ByteBuffer(json: #"{"query": "{ allTasks { id } }"}"#)) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate] == "Bearer")
            }
        }
    }

    @Test func cookieCallersNeedTheCSRFHeader() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (session, csrf) = try await browserSession(client)
            var headers = session
            headers[.contentType] = "application/json"
            let body = ByteBuffer(json: #"{"query": "{ allTasks { id } }"}"#)
            try await client.execute(uri: "/graphql", method: .post, headers: headers, body: body) { response in
                #expect(response.status == .forbidden)
            }
            headers[CSRFMiddleware.headerName] = csrf
            try await client.execute(uri: "/graphql", method: .post, headers: headers, body: body) { response in
                #expect(response.status == .ok)
            }
        }
    }

    @Test func getRunsQueriesButNotMutations() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let query = "query%20Q(%24first%3A%20Int)%20%7B%20allTasks(first%3A%20%24first)%20%7B%20id%20%7D%20%7D"
            try await client.execute(uri: "/graphql?query=\(query)&variables=%7B%22first%22%3A1%7D", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .ok)
                #expect((response.json()["data"] as? [String: Any])?["allTasks"] is [Any])
            }
            let mutation = "mutation%20%7B%20deleteTask(id%3A%20%221%22)%20%7D"
            try await client.execute(uri: "/graphql?query=\(mutation)", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "POST")
                #expect((response.json()["errors"] as? [[String: Any]])?.first?["message"] is String)
            }
        }
    }

    @Test func limitsAreGraphQLShapedErrors() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let deep = "{ allTasks { " + String(repeating: "a { ", count: 16) + "id" + String(repeating: " }", count: 16) + " } }"
            let (deepStatus, deepReply) = try await graphQL(client, token: token, deep)
            #expect(deepStatus == .badRequest)
            let deepError = try #require((deepReply["errors"] as? [[String: Any]])?.first)
            #expect((deepError["message"] as? String)?.contains("levels deep") == true)
            #expect((deepError["extensions"] as? [String: String])?["code"] == "QUERY_TOO_COMPLEX")

            let aliased = "{ " + (1...31).map { "t\($0): allTasks { id }" }.joined(separator: " ") + " }"
            let (aliasStatus, aliasReply) = try await graphQL(client, token: token, aliased)
            #expect(aliasStatus == .badRequest)
            #expect(((aliasReply["errors"] as? [[String: Any]])?.first?["message"] as? String)?.contains("aliases") == true)

            // A fragment that spreads itself must not hang the depth check.
            let (cycleStatus, _) = try await graphQL(client, token: token, "{ allTasks { ...F } } fragment F on Task { id ...F }")
            #expect(cycleStatus == .badRequest)

            let huge = ByteBuffer(string: #"{"query": "{ allTasks { id } }", "variables": {"x": ""# + String(repeating: "x", count: 1 << 20) + #""}}"#)
            try await client.execute(uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders), body: huge) { response in
                #expect(response.status == .contentTooLarge)
                #expect((response.json()["errors"] as? [[String: Any]])?.first?["message"] is String)
            }
            try await client.execute(uri: "/graphql", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(json: "{nope")) { response in
                #expect(response.status == .badRequest)
                #expect((response.json()["errors"] as? [[String: Any]])?.isEmpty == false)
            }
        }
    }

    @Test func anUnreachableUpstreamIsA502() async throws {
        let harness = try await TestHarness { $0.graphQLURL = "http://127.0.0.1:9/graphql" }
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let (status, reply) = try await graphQL(client, token: token, "{ allTasks { id } }")
            #expect(status == .badGateway)
            #expect(((reply["errors"] as? [[String: Any]])?.first?["message"] as? String)?.contains("cannot be reached") == true)
        }
    }
}
