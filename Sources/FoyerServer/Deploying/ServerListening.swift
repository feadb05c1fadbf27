import Synchronization

/// Says when the server's socket listens, to work that should not compete with start-up for a core (the demo
/// account's password hash). Waiting ends early if the waiting task is cancelled.
public final class ServerListening: Sendable {
    private struct State {
        var listening = false
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var isListening: Bool { state.withLock { $0.listening } }

    /// Returns once the server listens, or at once if it already does or the task is cancelled.
    public func wait() async {
        let waiter = state.withLock { state -> Int? in
            guard !state.listening else { return nil }
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        guard let waiter else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state in
                    if state.listening || Task.isCancelled { return true }
                    state.waiting[waiter] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiting.removeValue(forKey: waiter) }?.resume()
        }
    }

    func listened() {
        let waiting = state.withLock { state in
            state.listening = true
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for continuation in waiting { continuation.resume() }
    }
}
