import ArgumentParser
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How an instance leaves and how the next one arrives: the drain on SIGTERM, and the listening socket (bound with
/// `SO_REUSEPORT` beside a running instance, or passed by systemd).
public struct DeploySettings: Sendable {
    /// After SIGTERM, how long `/healthz` answers 503 while requests are still served, so a balancer stops sending
    /// new ones before the socket closes.
    public var drainDelay: Duration = .seconds(5)
    /// Then, how long open event streams and websockets have: each ends at its own moment within it, so their
    /// reconnects are spread out rather than all at once. The process exits when all have ended or this has passed.
    public var shutdownGrace: Duration = .seconds(30)
    /// A listening socket systemd passed (`LISTEN_FDS`, from fd 3): served instead of binding `--port`.
    public var inheritedListener: CInt?

    public init() {}

    /// The first socket systemd passed to this process, if it passed any (`LISTEN_PID` names this process). The
    /// variables are then removed, as `sd_listen_fds` does, so no child process takes them for its own.
    public static func systemdListener(environment: [String: String] = ProcessInfo.processInfo.environment) -> CInt? {
        guard let pid = environment["LISTEN_PID"].flatMap({ Int32($0) }), pid == getpid(),
            let count = environment["LISTEN_FDS"].flatMap({ Int($0) }), count >= 1
        else { return nil }
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
        return 3
    }
}

/// The deploy flags of `foyer serve`; each has an environment variable, and a flag wins over its variable.
public struct DeployOptions: ParsableArguments {
    @Option(help: "After SIGTERM, how long /healthz answers 503 while requests are still served, before the socket closes (env FOYER_DRAIN_DELAY; default 5s; 0: none)")
    var drainDelay: String?

    @Option(help: "Then, how long open event streams and websockets have to end, each at its own moment, before the process exits (env FOYER_SHUTDOWN_GRACE; default 30s; 0: all at once)")
    var shutdownGrace: String?

    public init() {}

    public func settings(environment: [String: String]) throws -> DeploySettings {
        var settings = DeploySettings()
        if let text = drainDelay ?? environment["FOYER_DRAIN_DELAY"] {
            settings.drainDelay = .milliseconds(Int64(try DurationText.seconds(text, option: "--drain-delay", allowingZero: true) * 1000))
        }
        if let text = shutdownGrace ?? environment["FOYER_SHUTDOWN_GRACE"] {
            settings.shutdownGrace = .milliseconds(Int64(try DurationText.seconds(text, option: "--shutdown-grace", allowingZero: true) * 1000))
        }
        settings.inheritedListener = DeploySettings.systemdListener(environment: environment)
        return settings
    }
}
