import Logging
import Synchronization

/// When start-up reached each of its steps, in milliseconds since the process's `main` began: the line saying the
/// server listens carries them (`start.database_ms=27.1`), so a slow start says where it went, as Spring Boot's
/// "Started … in 2.3 seconds" does. Only a process that began a timeline keeps one: a test that builds hundreds of
/// applications in one process logs none.
public enum StartupTimeline {
    private struct Timeline {
        let began: ContinuousClock.Instant
        var steps: [(name: String, at: ContinuousClock.Instant)] = []
    }

    private static let timeline = Mutex<Timeline?>(nil)

    /// Starts the timeline; called first thing in `main`.
    public static func begin() {
        timeline.withLock { $0 = Timeline(began: .now) }
    }

    /// Start-up reached `step` (a metadata key's part: `command_line`, `database`), if a timeline began.
    public static func reached(_ step: String) {
        let now = ContinuousClock.now
        timeline.withLock { $0?.steps.append((step, now)) }
    }

    /// Each step reached, as `start.<step>_ms` with its milliseconds since `begin`, to one decimal; empty without a
    /// timeline.
    static var metadata: Logger.Metadata {
        timeline.withLock { timeline in
            guard let timeline else { return [:] }
            var metadata = Logger.Metadata()
            for step in timeline.steps {
                let elapsed = timeline.began.duration(to: step.at).components
                let tenths = Int((Double(elapsed.seconds) * 10_000 + Double(elapsed.attoseconds) / 1e14).rounded())
                metadata["start.\(step.name)_ms"] = "\(tenths / 10).\(tenths % 10)"
            }
            return metadata
        }
    }
}
