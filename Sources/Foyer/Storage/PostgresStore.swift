import Foundation
import Logging
import NIOConcurrencyHelpers
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
        // The pool logs every failed connection attempt at info: while PostgreSQL is away that is a line every few
        // milliseconds. Foyer says so itself, once (ClusterSignals, /healthz, the 503s).
        var poolLogger = logger
        poolLogger.logLevel = max(logger.logLevel, .warning)
        let client = PostgresClient(configuration: configuration, backgroundLogger: poolLogger)
        self.client = client
        self.location = location
        self.schema = schema
        self.logger = logger
        self.running = Task { await client.run() }
    }

    public func close() { running.cancel() }

    /// One connection made by hand first: its error says why (refused, wrong password, no such database), where
    /// the pool would only retry until it gives up.
    private func waitUntilReachable(timeout: Duration) async throws {
        let (location, logger) = (location, logger)
        do {
            try await Self.connection(to: location, timeout: timeout, logger: logger).close()
        } catch let error as PSQLError {
            throw Unreachable(description: "PostgreSQL at \(location.redacted) cannot be used: \(Self.describe(error))")
        }
    }

    /// One connection of its own, outside any pool (TLS as the location asks).
    static func connection(to location: PostgresLocation, timeout: Duration, logger: Logger) async throws -> PostgresConnection {
        var configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.username, password: location.password,
            database: location.database, tls: try tls(location.tls, connection: true)
        )
        configuration.options.connectTimeout = .seconds(Int64(timeout.components.seconds))
        return try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
    }

    /// How long one statement or transaction may take, waiting for a connection included: while PostgreSQL is
    /// away the pool would hold a request for up to a minute before failing it.
    static let deadline: Duration = .seconds(5)

    /// Set when the database could not be reached, until a probe reaches it again: meanwhile requests fail at once
    /// instead of each waiting out the deadline (a load balancer's health check would give up first).
    private let down = NIOLockedValueBox<Unreachable?>(nil)

    /// `body` in one transaction on one connection: committed when it returns, rolled back when it throws
    /// (its error is rethrown as it was, unless it means the database is away: then `Unreachable`).
    func transaction<Value: Sendable>(
        deadline: Duration = PostgresStore.deadline, _ body: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws -> Value {
        let (client, logger) = (client, logger)
        return try await guarded(deadline: deadline) {
            try await client.withConnection { connection in
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
    }

    /// One statement outside any transaction; the rows collected.
    @discardableResult
    func query(_ query: PostgresQuery) async throws -> [PostgresRow] {
        let (client, logger) = (client, logger)
        return try await guarded { try await client.query(query, logger: logger).collect() }
    }

    /// A statement the server parses and plans once per connection (postgres-nio names it and prepares it on the
    /// connection's first use), for the hottest reads: the point read of a post runs about a third faster so.
    /// Its SQL names its columns, so a column another instance's migration adds does not change what it returns.
    func execute<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row] where Statement.Row: Sendable {
        let (client, logger) = (client, logger)
        return try await guarded {
            try await client.execute(statement, logger: logger).reduce(into: []) { rows, row in rows.append(row) }
        }
    }

    /// Runs `operation` within the deadline, and turns every way of failing to reach the database (pool errors,
    /// a closed connection, a server shutting down, the deadline) into `Unreachable`. Errors of statements and of
    /// the caller's own code pass unchanged.
    private func guarded<Value: Sendable>(
        deadline: Duration = PostgresStore.deadline, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        if let known = down.withLockedValue({ $0 }) { throw known }
        do {
            return try await withinDeadline(deadline: deadline, operation)
        } catch let error as Unreachable {
            noticeUnreachable(error)
            throw error
        }
    }

    /// Someone found the database away (a request, or the listening connection dropping): requests fail at once
    /// from now on, until a probe reaches it again.
    func noticeUnreachable(_ error: Unreachable) {
        let firstToNotice = down.withLockedValue { down in
            defer { down = error }
            return down == nil
        }
        if firstToNotice {
            logger.error("PostgreSQL cannot be reached; answering 503 until it can: \(error)")
            Task { await self.probeUntilReachable() }
        }
    }

    private func probeUntilReachable() async {
        let (client, logger) = (client, logger)
        while !running.isCancelled {
            try? await Task.sleep(for: .milliseconds(500))
            if (try? await withinDeadline({ try await client.query("SELECT 1", logger: logger).collect() })) != nil {
                down.withLockedValue { $0 = nil }
                logger.notice("PostgreSQL answers again")
                return
            }
        }
    }

    private func withinDeadline<Value: Sendable>(
        deadline: Duration = PostgresStore.deadline, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let location = location
        do {
            return try await withThrowingTaskGroup(of: Value?.self) { group in
                group.addTask { try await operation() }
                group.addTask {
                    try await Task.sleep(for: deadline)
                    return nil
                }
                defer { group.cancelAll() }
                guard case .some(.some(let value)) = try await group.next() else {
                    throw Unreachable(description: "PostgreSQL at \(location.redacted) did not answer within \(deadline)")
                }
                return value
            }
        } catch let error as PSQLError where Self.meansUnreachable(error) {
            throw Unreachable(description: "PostgreSQL at \(location.redacted) cannot be reached: \(Self.describe(error))")
        } catch let error where String(describing: type(of: error)) == "ConnectionPoolError" {
            // The pool's own errors (its module is not meant to be imported): no connection could be made.
            throw Unreachable(description: "PostgreSQL at \(location.redacted) cannot be reached: \(error)")
        }
    }

    /// The server is away or going (as opposed to refusing a statement): worth a 503 and another try later.
    static func meansUnreachable(_ error: PSQLError) -> Bool {
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed, .queryCancelled:
            return true
        case .server:
            // 08: connection exceptions; 57P: the server is shutting down or starting.
            let state = error.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || state.hasPrefix("57P")
        default:
            return false
        }
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
        switch tlsChoice(mode) {
        case nil: .disable
        case (let configuration, false)?: .prefer(configuration)
        case (let configuration, true)?: .require(configuration)
        }
    }

    private static func tls(_ mode: PostgresLocation.TLSMode, connection: Bool) throws -> PostgresConnection.Configuration.TLS {
        switch tlsChoice(mode) {
        case nil: .disable
        case (let configuration, false)?: .prefer(try NIOSSLContext(configuration: configuration))
        case (let configuration, true)?: .require(try NIOSSLContext(configuration: configuration))
        }
    }

    /// libpq's modes: nil is no TLS; `required` false means TLS when the server offers it.
    private static func tlsChoice(_ mode: PostgresLocation.TLSMode) -> (TLSConfiguration, required: Bool)? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch mode {
        case .disable:
            return nil
        case .allow, .prefer:
            configuration.certificateVerification = .none
            return (configuration, false)
        case .require:
            // As libpq: encrypted, the certificate not checked (that is verify-ca / verify-full).
            configuration.certificateVerification = .none
            return (configuration, true)
        case .verifyCA:
            configuration.certificateVerification = .noHostnameVerification
            return (configuration, true)
        case .verifyFull:
            return (configuration, true)
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
