import GRDB

/// Opens Foyer's SQLite database and brings its schema up to date.
public enum SQLiteStore {
    public static func open(path: String) throws -> any DatabaseWriter {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        if path == ":memory:" {
            return try DatabaseQueue(configuration: configuration)
        }
        // A pool puts the file in WAL mode: readers never wait for the writer.
        return try DatabasePool(path: path, configuration: configuration)
    }

    public static func openAndMigrate(path: String) throws -> any DatabaseWriter {
        let database = try open(path: path)
        try migrator.migrate(database)
        return database
    }
}
