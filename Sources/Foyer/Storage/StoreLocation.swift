import Foundation

/// What `--database` names: a SQLite file (the default, and `:memory:`), or a PostgreSQL server by URL
/// (`postgres://user:password@host:port/database?sslmode=…`), which several instances can share.
public enum StoreLocation: Sendable, Equatable {
    case sqlite(path: String)
    case postgres(PostgresLocation)

    public init(_ value: String) throws {
        if value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") {
            self = .postgres(try PostgresLocation(url: value))
        } else {
            self = .sqlite(path: value)
        }
    }

    /// For logs and messages: never the password.
    public var description: String {
        switch self {
        case .sqlite(let path): path
        case .postgres(let location): location.redacted
        }
    }
}

public struct PostgresLocation: Sendable, Equatable {
    /// libpq's `sslmode`, as far as a client without a CA file can honour it.
    public enum TLSMode: String, Sendable, CaseIterable {
        case disable, allow, prefer, require, verifyCA = "verify-ca", verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public init(url: String) throws {
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            throw Invalid(description: "\(Self.redact(url)) is not a PostgreSQL URL: expected postgres://user:password@host:port/database")
        }
        guard let username = components.user, !username.isEmpty else {
            throw Invalid(description: "\(Self.redact(url)) names no user: expected postgres://user:password@host:port/database")
        }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw Invalid(description: "\(Self.redact(url)) names no database: expected postgres://user:password@host:port/database")
        }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw Invalid(description: "sslmode=\(item.value ?? "") is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                tls = mode
            default:
                throw Invalid(description: "\(item.name) is not a database URL option Foyer knows (it knows sslmode)")
            }
        }
        self.host = host
        self.port = components.port ?? 5432
        self.username = username.removingPercentEncoding ?? username
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database.removingPercentEncoding ?? database
        self.tls = tls
    }

    public var redacted: String {
        "postgres://\(username)\(password == nil ? "" : ":***")@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)"
    }

    private static func redact(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "***"
        return components.string ?? "the database URL"
    }
}
