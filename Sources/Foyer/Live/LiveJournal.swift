import Foundation
import Logging
import ServiceLifecycle

/// Live events go through the store before they reach any page, so that an event id means the same on every
/// instance sharing the store and after a restart: a page reconnecting to another instance, or to this one
/// started again, gets exactly what it missed. The instance where a change happens appends its event and tells
/// the others (the cluster bus), who read it back from the store; each publishes it under the store's number.
/// `LiveStreams` does the work, one item at a time in order (`LiveJournalService`).
final class LiveJournal: Sendable {
    /// Another instance appended to a stream: read it from the store.
    struct Appended: Codable, Sendable {
        let stream: String
        let sequence: UInt64
    }
    static let appended = ClusterTopic<Appended>("live.appended")

    enum Work: Sendable {
        /// This instance's event: append it to the named stream (an edition, `LiveStreams.Edition`) and publish it.
        case append(html: String, stream: String, author: Int64?)
        /// Publish what the store has after this instance's latest (through `sequence`, when it is known).
        case catchUp(String, through: UInt64?)
        /// The same, on every stream.
        case catchUpEverything
    }

    let storage: any LiveJournalStorage
    /// Names this store's numbering in event ids: an id from another database (or one made anew) means "reload".
    let epoch: String
    let cluster: ClusterBus?
    let logger: Logger
    let work: AsyncStream<Work>
    private let queue: AsyncStream<Work>.Continuation

    init(storage: any LiveJournalStorage, epoch: String, cluster: ClusterBus?, logger: Logger) {
        (self.storage, self.epoch, self.cluster, self.logger) = (storage, epoch, cluster, logger)
        (work, queue) = AsyncStream.makeStream(of: Work.self)
        let queue = queue
        cluster?.on(Self.appended) { appended in queue.yield(.catchUp(appended.stream, through: appended.sequence)) }
        // Messages may have been missed while the bus was away; the store has every event.
        cluster?.onGap { queue.yield(.catchUpEverything) }
    }

    static func open(store: Store, cluster: ClusterBus?, logger: Logger) async throws -> LiveJournal {
        let secret = try await store.serverSecret(named: "live_events")
        return LiveJournal(storage: store.liveJournalStorage, epoch: secret.prefix(4).hexString, cluster: cluster, logger: logger)
    }

    func enqueue(_ item: Work) { queue.yield(item) }

    /// No more work is taken; what was queued is still done.
    func finish() { queue.finish() }
}

/// Runs the journal's work until the application stops, then finishes what was queued.
struct LiveJournalService: Service {
    let streams: LiveStreams

    func run() async {
        await withGracefulShutdownHandler {
            await streams.keepJournal()
        } onGracefulShutdown: {
            streams.journal?.finish()
        }
    }
}
