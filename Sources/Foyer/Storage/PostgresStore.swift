import Foundation
import Logging
import NIOSSL
import PostgresNIO

/// A pool of connections to the PostgreSQL server several Foyer instances share. It runs its pool itself from
/// `open` until `close`, so the schema can be brought up to date before any service starts.
public final class PostgresStore: Sendable {
    let client: PostgresClient
    let location: PostgresLocation
    /// Where the tables are, when not in the database's default schema (tests).
    let schema: String?
    let logger: Logger
    private let running: Task<Void, Never>

    public struct Unreachable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Connects (waiting at most `timeout` for the server) and brings the schema up to date.
    public static func open(_ location: PostgresLocation, schema: String? = nil, logger: Logger, timeout: Duration = .seconds(10)) async throws -> PostgresStore {
        let store = PostgresStore(location: location, schema: schema, logger: logger)
        do {
            try await store.waitUntilReachable(timeout: timeout)
            try await PostgresMigrations.migrate(store)
        } catch {
            store.close()
            throw error
        }
        return store
    }

    private init(location: PostgresLocation, schema: String?, logger: Logger) {
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.username, password: location.password,
            database: location.database, tls: Self.tls(location.tls)
        )
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 16
        // Tests give each store a schema of its own; instances share the default one.
        if let schema { configuration.options.additionalStartupParameters = [("search_path", schema)] }
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.location = location
        self.schema = schema
        self.logger = logger
        self.running = Task { await client.run() }
    }

    public func close() { running.cancel() }

    private func waitUntilReachable(timeout: Duration) async throws {
        let client = client
        let location = location
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.query("SELECT 1") }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw Unreachable(description: "PostgreSQL at \(location.redacted) did not answer within \(timeout)")
            }
            defer { group.cancelAll() }
            do {
                try await group.next()
            } catch let error as PSQLError {
                throw Unreachable(description: "PostgreSQL at \(location.redacted) cannot be used: \(Self.describe(error))")
            }
        }
    }

    /// `body` in one transaction on one connection: committed when it returns, rolled back when it throws
    /// (its error is rethrown as it was).
    func transaction<Value: Sendable>(_ body: @Sendable (PostgresConnection) async throws -> Value) async throws -> Value {
        let logger = logger
        return try await client.withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            let value: Value
            do {
                value = try await body(connection)
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
            try await connection.query("COMMIT", logger: logger)
            return value
        }
    }

    /// One statement outside any transaction; the rows collected.
    @discardableResult
    func query(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await client.query(query, logger: logger).collect()
    }

    static func isUniqueViolation(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }

    /// What the server or the connection said, without the query PostgresNIO would print.
    static func describe(_ error: PSQLError) -> String {
        if let message = error.serverInfo?[.message] { return message }
        if let underlying = error.underlying { return "\(error.code): \(underlying)" }
        return "\(error.code)"
    }

    private static func tls(_ mode: PostgresLocation.TLSMode) -> PostgresClient.Configuration.TLS {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch mode {
        case .disable:
            return .disable
        case .allow, .prefer:
            configuration.certificateVerification = .none
            return .prefer(configuration)
        case .require:
            // As libpq: encrypted, the certificate not checked (that is verify-ca / verify-full).
            configuration.certificateVerification = .none
            return .require(configuration)
        case .verifyCA:
            configuration.certificateVerification = .noHostnameVerification
            return .require(configuration)
        case .verifyFull:
            return .require(configuration)
        }
    }
}

extension PostgresConnection {
    /// One statement in the transaction; the rows collected.
    @discardableResult
    func run(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRow] {
        try await self.query(query, logger: logger).collect()
    }
}
