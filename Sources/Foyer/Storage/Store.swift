import GRDB
import Logging

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
        case .sqlite(let path): .sqlite(try FoyerDatabase.openAndMigrate(path: path))
        case .postgres(let location): .postgres(try await PostgresStore.open(location, logger: logger))
        }
    }
}
