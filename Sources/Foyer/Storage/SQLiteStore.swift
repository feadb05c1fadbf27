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
        let migrator = migrator
        try SQLiteSchemaSnapshot.loadIfEmpty(database, migrator: migrator)
        try migrator.migrate(database)
        return database
    }
}

extension DatabaseReader {
    /// A read run on the calling thread (an event loop's): GRDB's async `read` hops to the reader's dispatch queue
    /// and back, which cost a point read ~3/4 of its time (`GET /api/v1/posts/{id}` went from 0.25x to 0.6x of `/up`
    /// in scripts/bench without it). In WAL mode a reader never waits for the writer, so a read takes microseconds.
    ///
    /// Every SQLite read goes through here, none through the async `read`: an async read keeps its reader until its
    /// continuation has run on an event loop, so event loops blocked here waiting for a reader could wait forever.
    /// (Five on the account page did: `SQLiteReaderPoolTests`, which also holds the sources to this.)
    func readNow<Value>(_ body: (Database) throws -> Value) throws -> Value {
        try read(body)
    }

    /// The same for a read of one statement, without the transaction around it (one statement sees one snapshot
    /// anyway): BEGIN and COMMIT were another tenth of a point read.
    func readStatementNow<Value>(_ body: (Database) throws -> Value) throws -> Value {
        try unsafeRead(body)
    }
}
