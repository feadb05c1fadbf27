import GRDB
import Logging
import NIOPosix

/// Where Foyer keeps what it owns: one instance's SQLite file (through GRDB), or a PostgreSQL server that
/// several instances share. Each repository has a storage protocol with one implementation for each.
public enum Store: Sendable {
    case sqlite(any DatabaseWriter)
    case postgres(PostgresStore)
}

extension Store {
    /// The implementation for this store, of a storage protocol with one for each.
    func choose<Storage>(sqlite: (any DatabaseWriter) -> Storage, postgres: (PostgresStore) -> Storage) -> Storage {
        switch self {
        case .sqlite(let database): sqlite(database)
        case .postgres(let store): postgres(store)
        }
    }

    /// Opens what `--database` names and brings its schema up to date.
    public static func open(_ location: String, logger: Logger) async throws -> Store {
        switch try StoreLocation(location) {
        // On the blocking-work pool: the global executor is the event loops, and a fresh database's migrations
        // would hold one of them (and whatever start-up runs beside them) for tens of milliseconds.
        case .sqlite(let path): .sqlite(try await NIOThreadPool.singleton.runIfActive { try SQLiteStore.openAndMigrate(path: path) })
        case .postgres(let location): .postgres(try await PostgresStore.open(location, logger: logger))
        }
    }
}

extension Store {
    /// Runs `body` while no other instance sharing the store runs work of the same `name`: a Keycloak refresh of
    /// one session, a pass over the push outbox. Nil, without running `body`, when another keeps it past `wait`
    /// (nil: not waiting at all). One process owns a SQLite file, so there it just runs; on PostgreSQL it holds a
    /// lease (`PostgresLeases`).
    func exclusively<Value: Sendable>(
        _ name: String, term: Duration = PostgresStore.leaseTerm, waitingUpTo wait: Duration?, _ body: @escaping @Sendable () async throws -> Value
    ) async throws -> Value? {
        switch self {
        case .sqlite: try await body()
        case .postgres(let store): try await store.withLease(name, term: term, waitingUpTo: wait, body)
        }
    }
}
