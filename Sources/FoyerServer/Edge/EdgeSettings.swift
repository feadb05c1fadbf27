#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How long a client may take and how much it may send before Foyer gives up on it: what nginx and Go's server
/// guard at the edge (`client_header_timeout`, `keepalive_timeout`, `large_client_header_buffers`,
/// `ReadHeaderTimeout`, `IdleTimeout`). Flags and defaults are in the README's Operating section.
public struct EdgeSettings: Sendable {
    /// A request head must arrive within this, from the first byte (or from the connection's opening, for its first
    /// request); a body may pause no longer than this; a response the client does not read for this long is dropped.
    public var headerTimeout: Duration = .seconds(30)
    /// A kept-alive connection with no request under way is closed after this. Event streams and websockets are
    /// never idle in this sense (their heartbeats keep them alive).
    public var idleTimeout: Duration = .seconds(75)
    /// Open client connections at most; nil: a little under the process's open-file limit, leaving what the
    /// database, upstream connections and logs need.
    public var maximumConnections: Int?

    /// The request line and headers together, in bytes: over it, `431`.
    public static let maximumHeadBytes = 16 * 1024
    /// The request line alone (method, target, version): over it, `414`.
    public static let maximumRequestLineBytes = 8 * 1024
    /// Header fields in one request: over it, `431`.
    public static let maximumHeaderCount = 100
    /// Connections the kernel may hold before Foyer accepts them (it caps this at `net.core.somaxconn`). Hummingbird's
    /// 256 overflowed while 2,000 connections opened at once: each connection over it waits a second for its SYN to be
    /// sent again.
    static let listenBacklog = 4096

    public init() {}

    var connectionCap: Int { maximumConnections ?? Self.connectionCapFromFileLimit() }

    /// Raises the soft open-file limit to the hard one, as Go's runtime does at start (nginx has
    /// `worker_rlimit_nofile`): a shell's default of 1,024 would cap a server at a few hundred clients.
    public static func raiseOpenFileLimit() {
        var limit = rlimit()
        #if canImport(Glibc)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(resource, &limit)
    }

    /// The open-file limit less a twentieth of it (at least 256) for everything that is not a client connection.
    static func connectionCapFromFileLimit() -> Int {
        var limit = rlimit()
        #if canImport(Glibc)
        let read = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        #else
        let read = getrlimit(RLIMIT_NOFILE, &limit)
        #endif
        // No limit at all (RLIM_INFINITY) reads as a very large number.
        guard read == 0, limit.rlim_cur < 1 << 30 else { return 10_000 }
        let files = Int(clamping: limit.rlim_cur)
        return max(16, files - max(256, files / 20))
    }
}
