import Foundation
import Logging
import ServiceLifecycle

/// Sends what the outbox holds: whatever is due, oldest first, at once when this instance wrote it and within a
/// couple of seconds when another did. A mail the server did not take is tried again with growing waits (5 s,
/// 10 s, 20 s … at most an hour apart) and given up 24 hours after it was written, with a log line and a metric.
/// Nothing is lost across restarts: a mail leaves the outbox only once the server took it. A crash in the moment
/// between the server's answer and that delete sends it once more, with the same Message-ID.
final class MailSender: Service, Sendable {
    static let givingUpAfter: TimeInterval = 24 * 60 * 60
    static let pollInterval: Duration = .seconds(2)
    /// Long enough for one batch's SMTP conversations; a claim older than this is another instance that died.
    static let claimLength: TimeInterval = 10 * 60
    static let batch = 20

    let outbox: any MailOutboxStorage
    let delivery: any MailDelivery
    let sender: MailAddress
    let metrics: FoyerMetrics
    let logger: Logger
    /// One waiting wake-up at most: nudges while a round runs fold into one more round.
    private let wakes: AsyncStream<Void>
    private let waker: AsyncStream<Void>.Continuation

    init(outbox: any MailOutboxStorage, delivery: any MailDelivery, sender: MailAddress, metrics: FoyerMetrics, logger: Logger) {
        (self.outbox, self.delivery, self.sender, self.metrics, self.logger) = (outbox, delivery, sender, metrics, logger)
        (wakes, waker) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Something was just written to the outbox: look now rather than at the next poll.
    func nudge() { waker.yield() }

    func run() async throws {
        logger.info("\(delivery.summary)")
        // The first look is a poll interval after start, not during it: start-up has the store busy enough (and a
        // test's app, which lives a second or two, then never opens a connection for the sender).
        let poller = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.pollInterval)
                waker.yield()
            }
        }
        await withGracefulShutdownHandler {
            for await _ in wakes { await sendDue() }
        } onGracefulShutdown: {
            self.waker.finish()
        }
        poller.cancel()
    }

    /// Every mail due now, batch after batch.
    func sendDue(now: @autoclosure () -> Date = Date()) async {
        while true {
            let due: [QueuedMail]
            do {
                let time = now()
                due = try await outbox.claimDue(now: time, limit: Self.batch, claimUntil: time.addingTimeInterval(Self.claimLength))
            } catch {
                logger.warning("could not read the mail outbox: \(error)")
                return
            }
            for queued in due { await send(queued, now: now()) }
            if due.count < Self.batch { return }
        }
    }

    private func send(_ queued: QueuedMail, now: Date) async {
        let outcome = await delivery.deliver(queued.mail, from: sender)
        do {
            switch outcome {
            case .delivered:
                try await outbox.remove(id: queued.id)
                metrics.mail(delivery is MailFolder ? .written : .sent)
            case .rejected(let reason):
                try await outbox.remove(id: queued.id)
                metrics.mail(.rejected)
                logger.error("the SMTP server refused mail \(queued.mail.messageID) to \(queued.mail.recipient) for good: \(reason)")
            case .failed(let reason) where now.timeIntervalSince(queued.createdAt) >= Self.givingUpAfter:
                try await outbox.remove(id: queued.id)
                metrics.mail(.gaveUp)
                logger.error(
                    "gave up mail \(queued.mail.messageID) to \(queued.mail.recipient) after \(queued.attempts + 1) attempts over 24 hours: \(reason)"
                )
            case .failed(let reason):
                let wait = Self.backoff(attempts: queued.attempts + 1)
                try await outbox.retry(id: queued.id, at: now.addingTimeInterval(wait), error: reason)
                metrics.mail(.retried)
                logger.warning("mail \(queued.mail.messageID) not sent (attempt \(queued.attempts + 1)); trying again in \(Int(wait)) s: \(reason)")
            }
        } catch {
            // The claim lapses and the mail is taken again.
            logger.warning("could not record how mail \(queued.mail.messageID) went: \(error)")
        }
    }

    /// 5 s after the first failure (a server restarting), doubling, at most an hour; a tenth of jitter so a server's
    /// return is not met by every instance's retries at once.
    static func backoff(attempts: Int) -> TimeInterval {
        let base = min(3600, 5 * pow(2, Double(max(0, attempts - 1))))
        return base * Double.random(in: 0.9...1.1)
    }
}
