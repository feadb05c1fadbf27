import Hummingbird
import NIOCore
import Synchronization

/// Whether this instance is on its way out, and when each long-lived connection it holds should end. Begun by the
/// first SIGTERM (`FoyerApplication`): `/healthz` answers 503 and every response closes its connection (so a
/// balancer keeps no idle connection to it); once the server stops accepting, event streams and websockets end
/// spread over the grace.
public final class Drain: Sendable {
    public let settings: DeploySettings
    /// Read on every response: a flag, not the lock around the time.
    private let draining = Atomic<Bool>(false)
    private let began = Mutex<ContinuousClock.Instant?>(nil)

    public init(settings: DeploySettings) {
        self.settings = settings
    }

    public var isDraining: Bool { draining.load(ordering: .relaxed) }
    /// When the signal came.
    public var beganAt: ContinuousClock.Instant? { began.withLock { $0 } }

    /// Set by `begin(atOnce: true)` (Ctrl-C): long-lived connections end without waiting their turn.
    private let atOnce = Atomic<Bool>(false)

    /// `atOnce`: a person stopping the server by hand (SIGINT), not a deploy: nothing waits for a balancer or spreads
    /// reconnects.
    public func begin(atOnce: Bool = false) {
        began.withLock { $0 = $0 ?? .now }
        if atOnce { self.atOnce.store(true, ordering: .relaxed) }
        draining.store(true, ordering: .relaxed)
    }

    /// When one long-lived connection should end, from the moment the server stops accepting: anywhere in the first
    /// nine tenths of the grace (the rest leaves the last ones time to close before the process exits).
    public func endingDelay() -> TimeAmount {
        let spread = Int64(settings.shutdownGrace.seconds * 1_000)
        guard spread > 0, !atOnce.load(ordering: .relaxed) else { return .zero }
        return .milliseconds(Int64.random(in: 0...(spread * 9 / 10)))
    }

    /// The `retry:` an ending event stream is told: its browser reconnects after this, a little apart from the
    /// others that end in the same moment.
    public func reconnectDelayMilliseconds() -> Int { Int.random(in: 250...1_500) }
}
