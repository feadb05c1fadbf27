import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct TaskPagesTests {
    /// Creates a task through the form; returns its page's path.
    func createTask(_ client: some TestClientProtocol, _ session: (headers: HTTPFields, csrf: String), title: String) async throws -> String {
        try await client.execute(
            uri: "/tasks", method: .post, headers: session.headers,
            body: formBody([("authenticity_token", session.csrf), ("title", title), ("description", "About \(title)"), ("status", "OPEN")])
        ) { response in
            #expect(response.status == .seeOther)
            return try #require(response.headers[.location])
        }
    }

    @Test func pagesNeedASignedInUser() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/tasks", method: .get, headers: browserHeaders) { response in
                #expect(response.status == .unauthorized)
                #expect(response.text.contains(#"name="return_to" value="/tasks""#))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func createShowListAndJSON(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let session = try await browserSession(client)
            try await client.execute(uri: "/tasks/new", method: .get, headers: session.headers) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#"<form action="/tasks" method="post""#))
            }
            let path = try await createTask(client, session, title: "Water the plants")
            try await client.execute(uri: path, method: .get, headers: session.headers) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains("Water the plants"))
                #expect(!response.text.contains("version 1"), "the version is kept out of sight")
            }
            try await client.execute(uri: "/tasks", method: .get, headers: session.headers) { response in
                #expect(response.text.contains("Water the plants"))
                #expect(response.text.contains(#"data-status="OPEN""#))
                #expect(response.text.contains(#"<span class="visually-hidden">Mark </span>Complete</button>"#))
                #expect(response.text.contains(#"<span class="segment" aria-current="true" data-status="OPEN">Open</span>"#))
            }
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/tasks.json", method: .get, headers: bearer(token)) { response in
                let tasks = try #require(try JSONSerialization.jsonObject(with: Data(response.text.utf8)) as? [[String: Any]])
                #expect(tasks.first?["title"] as? String == "Water the plants")
                #expect(tasks.first?["status"] as? String == "OPEN")
            }
        }
    }

    /// Every template and partial escapes by bytes (`HTMLEscapedByBytes`). Mustache's own escaping compares
    /// Characters, so it leaves a `<` that a combining mark follows as it is: the mark tells whose escaping ran.
    @Test func aTitleIsEscapedByFoyerOnThePageAndInTheListsPartial() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let session = try await browserSession(client)
            let path = try await createTask(client, session, title: "<b>\"Tom\" & 'Jerry'</b> <\u{0338}")
            let escaped = "&lt;b&gt;&quot;Tom&quot; &amp; &#39;Jerry&#39;&lt;/b&gt; &lt;\u{0338}"
            // The task's own heading (its page's <title> is escaped by the layout, in Swift), and its row in the list.
            for (uri, shown) in [(path, "<h1>\(escaped)</h1>"), ("/tasks", escaped)] {
                try await client.execute(uri: uri, method: .get, headers: session.headers) { response in
                    #expect(response.status == .ok)
                    #expect(response.text.contains(shown), "\(uri)")
                    #expect(!response.text.contains("<b>"), "\(uri)")
                }
            }
        }
    }

    @Test func blankTitleIs422WithTheForm() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let session = try await browserSession(client)
            try await client.execute(
                uri: "/tasks", method: .post, headers: session.headers,
                body: formBody([("authenticity_token", session.csrf), ("title", " "), ("description", "kept"), ("status", "OPEN")])
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains("Title can&#39;t be blank"))
                #expect(response.text.contains(">kept</textarea>"))
            }
        }
    }

    @Test func statusButtonsChangeTheStatus() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let session = try await browserSession(client)
            let path = try await createTask(client, session, title: "Toggle me")
            let id = String(path.split(separator: "/").last!)
            try await client.execute(
                uri: "/tasks/\(id)/status", method: .post, headers: session.headers,
                body: formBody([("authenticity_token", session.csrf), ("version", "1"), ("status", "COMPLETE")])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/tasks")
            }
            try await client.execute(uri: "/tasks", method: .get, headers: session.headers) { response in
                #expect(response.text.contains(#"data-status="COMPLETE""#))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func aStaleEditIsA409WithBothVersionsAndARetryOnTheLatest(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let session = try await browserSession(client)
            let path = try await createTask(client, session, title: "Shared")
            func patch(version: String, title: String) async throws -> TestResponse {
                try await client.execute(
                    uri: path, method: .post, headers: session.headers,
                    body: formBody([
                        ("_method", "patch"), ("authenticity_token", session.csrf), ("version", version),
                        ("title", title), ("description", "d"), ("status", "ASSIGNED"),
                    ])
                )
            }
            #expect(try await patch(version: "1", title: "Theirs").status == .seeOther)
            let conflict = try await patch(version: "1", title: "Mine")
            #expect(conflict.status == .conflict)
            #expect(conflict.text.contains("Theirs") && conflict.text.contains("Mine"))
            // The page tasks and posts share: its heading, and who saved theirs (a task server does not say).
            #expect(conflict.text.contains("<h1>Someone changed this task</h1>") && conflict.text.contains("someone else saved this task"))
            #expect(conflict.text.contains(#"name="version" value="2""#), "the retry form is at the latest version")
            #expect(try await patch(version: "2", title: "Mine").status == .seeOther)
            try await client.execute(uri: path, method: .get, headers: session.headers) { response in
                #expect(response.text.contains("Mine"))
            }
            try await client.execute(uri: path + "/edit", method: .get, headers: session.headers) { response in
                #expect(response.text.contains(#"name="version" value="3""#))
            }
        }
    }

    @Test(arguments: TestStoreKind.allCases) func deleteThenTheTaskIsA404(kind: TestStoreKind) async throws {
        let harness = try await TestHarness(kind)
        try await harness.test { client in
            let session = try await browserSession(client)
            let path = try await createTask(client, session, title: "Short-lived")
            try await client.execute(
                uri: path, method: .post, headers: session.headers,
                body: formBody([("_method", "delete"), ("authenticity_token", session.csrf)])
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/tasks")
            }
            try await client.execute(uri: path, method: .get, headers: session.headers) { response in
                #expect(response.status == .notFound)
                #expect(response.text.contains("Task not found"))
            }
        }
    }

    @Test func anUnreachableUpstreamIsAClearPageNotA500() async throws {
        let harness = try await TestHarness { $0.graphQLURL = "http://127.0.0.1:9/graphql" }
        try await harness.test { client in
            let session = try await browserSession(client)
            try await client.execute(uri: "/tasks", method: .get, headers: session.headers) { response in
                #expect(response.status == .badGateway)
                #expect(response.text.contains("Tasks are unavailable"))
                #expect(response.text.contains("/turbo.min.js"))
            }
        }
    }
}
