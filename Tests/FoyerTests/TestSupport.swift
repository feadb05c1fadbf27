import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import Foyer
import PostgresNIO

/// The repository root, so tests use the real Templates/, Public/ and path_configuration.json.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

struct TestUser {
    static let ada = TestUser(email: "ada@example.com", password: "correct horse battery")
    static let bob = TestUser(email: "bob@example.com", password: "staple of bob's")
    let email: String
    let password: String
}

/// An app on a fresh database holding two users, Ada and Bob: in-memory SQLite unless told otherwise.
struct TestHarness {
    let store: Store
    let config: FoyerConfig

    /// For tests that look at SQLite's rows themselves.
    var database: any DatabaseWriter {
        guard case .sqlite(let database) = store else { preconditionFailure("this test reads SQLite's rows") }
        return database
    }

    init(_ kind: TestStoreKind = .sqlite, configure: (inout FoyerConfig) -> Void = { _ in }) async throws {
        try await self.init(store: try await Store.fresh(kind), configure: configure)
    }

    /// On a store of the test's own, such as a file's SQLite, whose readers are a pool as in production (in-memory
    /// SQLite has one connection, and no pool to run out of).
    init(store: Store, configure: (inout FoyerConfig) -> Void = { _ in }) async throws {
        var config = FoyerConfig()
        config.databasePath = ":memory:"
        config.resourcesDirectory = packageRoot
        config.passwordHashCost = 4
        config.demoAccount = nil
        config.logLevel = .warning
        config.port = 0  // live tests: any free port
        // A live test's server stops at once: its streams and websockets end together, not spread over 30 s.
        config.deploy.shutdownGrace = .zero
        // Mail the app writes without SMTP: into a folder of the test's own, not the package's.
        config.mail.folder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-test-mail").path
        configure(&config)
        self.config = config
        self.store = store
        try await Self.addUsers(to: store)
    }

    private static func addUsers(to store: Store) async throws {
        let users = UserRepository(store: store, passwordHashCost: 4)
        for user in [TestUser.ada, .bob] {
            try await users.create(email: user.email, password: user.password)
        }
    }

    /// `.router` unless the test needs real sockets (`.live`, for websockets).
    func test<Value: Sendable>(
        _ setup: TestingSetup = .router, _ body: @Sendable (any TestClientProtocol) async throws -> Value
    ) async throws -> Value {
        let app = try await buildApplication(config, store: store)
        return try await app.test(setup, body)
    }
}

/// The stores tests run on: SQLite and PostgreSQL, on the cluster FOYER_TEST_POSTGRES_URL names (scripts/test starts
/// one; `scripts/postgres-cluster start DIR` prints a URL for running `swift test` alone). Without it the PostgreSQL
/// tests fail, saying so: a run that skipped them would pass without testing what they test.
enum TestStoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    static let postgresURL = ProcessInfo.processInfo.environment["FOYER_TEST_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }

    var testDescription: String { rawValue }
}

extension Store {
    /// A fresh store with Foyer's schema: in-memory SQLite, or a PostgreSQL schema of its own on the test cluster.
    static func fresh(_ kind: TestStoreKind) async throws -> Store {
        switch kind {
        case .sqlite:
            return .sqlite(try SQLiteStore.openAndMigrate(path: ":memory:"))
        case .postgres:
            let url = try #require(TestStoreKind.postgresURL, "FOYER_TEST_POSTGRES_URL names no test cluster (scripts/test starts one)")
            let location = try PostgresLocation(url: url)
            let schema = "test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            var logger = Logger(label: "test-postgres")
            logger.logLevel = .warning
            // One plain connection makes the schema: a store would migrate the default schema first, under the
            // migrations' lock, for every test at once (the suite's PostgreSQL tests then missed the store's 5 s
            // deadline waiting for it on a loaded machine).
            let connection = try await PostgresStore.connection(to: location, timeout: .seconds(10), logger: logger)
            try await connection.query("CREATE SCHEMA \(unescaped: schema)", logger: logger)
            try await connection.close()
            return .postgres(try await PostgresStore.open(location, schema: schema, logger: logger))
        }
    }

    /// Another pool on the same PostgreSQL tables, as a second instance has; SQLite's one connection is itself.
    static func reopen(_ store: Store) async throws -> Store {
        guard let postgres = store.postgres else { return store }
        return .postgres(try await PostgresStore.open(postgres.location, schema: postgres.schema, logger: postgres.logger))
    }

    /// The PostgreSQL store behind this one, for `try #require(store.postgres)` in tests that need PostgreSQL itself.
    var postgres: PostgresStore? {
        if case .postgres(let store) = self { store } else { nil }
    }

    func close() {
        if case .postgres(let store) = self { store.close() }
    }
}

extension ByteBuffer {
    init(json: String) { self.init(string: json) }
}

extension TestResponse {
    var text: String { String(buffer: body) }

    /// The body as a JSON object; records an issue (and gives an empty object) when it is not one.
    func json(sourceLocation: SourceLocation = #_sourceLocation) -> [String: Any] {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] else {
            Issue.record("expected a JSON object, got \(text)", sourceLocation: sourceLocation)
            return [:]
        }
        return object
    }

    /// Every Set-Cookie header, parsed.
    var setCookies: [String] { headers[values: .setCookie] }

    func cookie(named name: String) -> String? {
        setCookies.first { $0.hasPrefix(name + "=") }
    }
}

let jsonHeaders: HTTPFields = [.contentType: "application/json"]
let formHeaders: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
let browserHeaders: HTTPFields = [.accept: "text/html,application/xhtml+xml", .userAgent: "Mozilla/5.0 (X11; Linux x86_64) Chrome/130"]

extension HTTPFields {
    func merging(_ other: HTTPFields) -> HTTPFields {
        var merged = self
        for field in other { merged[field.name] = field.value }
        return merged
    }
}

func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)"] }

func cookieHeader(_ token: String) -> HTTPFields { [.cookie: "foyer_session=\(token)", .accept: "text/html"] }

/// Signs in through the API and returns the session token and the session's JSON.
@discardableResult
func signIn(_ client: some TestClientProtocol, as user: TestUser = .ada, userAgent: String = "FoyerTests") async throws -> (token: String, session: [String: Any]) {
    try await client.execute(
        uri: "/api/v1/sessions", method: .post,
        headers: [.contentType: "application/json", .userAgent: userAgent],
        body: ByteBuffer(json: #"{"email": "\#(user.email)", "password": "\#(user.password)"}"#)
    ) { response in
        #expect(response.status == .created)
        let token = try #require(response.headers[HTTPField.Name("X-Session-Token")!])
        return (token, response.json())
    }
}

/// The csrf-token meta tag of a page.
func csrfToken(in html: String) throws -> String {
    let marker = #"<meta name="csrf-token" content=""#
    let start = try #require(html.range(of: marker), "page has no csrf-token meta tag")
    let rest = html[start.upperBound...]
    return String(rest.prefix { $0 != "\"" })
}

func formBody(_ fields: [(String, String)]) -> ByteBuffer {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    let encoded = fields.map { name, value in
        "\(name)=\(value.addingPercentEncoding(withAllowedCharacters: allowed)!)"
    }
    return ByteBuffer(string: encoded.joined(separator: "&"))
}

/// What a browser holds after loading the sign-in page: the headers of a form post carrying its pre-session
/// cookie, and the token the form echoes as `authenticity_token`.
func signInForm(_ client: some TestClientProtocol, headers extra: HTTPFields = [:]) async throws -> (headers: HTTPFields, token: String) {
    try await client.execute(uri: "/sign_in", method: .get, headers: browserHeaders) { response in
        let cookie = try #require(response.cookie(named: "foyer_sign_in"))
        let value = cookie.dropFirst("foyer_sign_in=".count).prefix { $0 != ";" }
        let html = response.text
        let marker = #"name="authenticity_token" value=""#
        let start = try #require(html.range(of: marker), "the sign-in form has no authenticity_token")
        var headers = formHeaders.merging(extra)
        headers[.cookie] = "foyer_sign_in=\(value)"
        return (headers, String(html[start.upperBound...].prefix { $0 != "\"" }))
    }
}

/// Waits for `check` to hold, asking every 50 ms; records an issue when it does not within `limit` (wide: it tells an
/// event from its absence, and CI runs every suite at once on two cores).
func eventually(
    within limit: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation, _ check: @Sendable () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + limit
    while try await !check() {
        guard ContinuousClock.now < deadline else {
            Issue.record("not within \(limit)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(50))
    }
}
