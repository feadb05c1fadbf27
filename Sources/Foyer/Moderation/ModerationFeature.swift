import Foundation
import Logging
import ServiceLifecycle

/// What keeps user-generated content fit to share, as app stores ask of apps that show it: terms accepted before
/// posting, the operator's address, reports to the moderators, and their queue with its actions and audit log.
struct ModerationFeature {
    /// Both people of a changed block: every instance reads their sets again.
    static let blocksChanged = ClusterTopic<[Int64]>("moderation.blocks_changed")

    let terms: Terms
    /// What a post passes first: the terms accepted, a new account's pace, watched words.
    let rules: PostingRules
    let blocks: Blocks
    let termsStorage: any TermsStorage
    let reports: any ReportStorage
    let storage: any ModerationStorage
    /// Moderators are told of each report by mail, and people of what was done, through the outbox.
    let mail: MailFeature
    let metrics: FoyerMetrics

    /// How long a removed post can be restored before it is deleted with its pictures.
    static let restorable: TimeInterval = 30 * 24 * 3600

    init(_ app: Foundations, mail: MailFeature) async throws {
        (self.mail, metrics) = (mail, app.metrics)
        reports = app.store.reportStorage
        let storage = app.store.moderationStorage
        self.storage = storage
        let settings = app.config.moderation
        let html = try Terms.text(settings: settings, views: app.views)
        let version = Terms.version(of: html)
        termsStorage = app.store.termsStorage
        terms = Terms(
            version: version, html: html, effectiveAt: try await termsStorage.effectiveAt(version: version, now: Date()),
            contactEmail: settings.contactEmail
        )
        let watched = try settings.watchedWordsFile.map(WatchedWords.init(contentsOf:)) ?? WatchedWords()
        rules = PostingRules(
            terms: terms, watched: watched, storage: app.store.postStorage, reports: reports,
            holdMails: ReportsController.moderatorMails(mail: mail.accountMail, reporterName: nil)
        )
        let blocks = Blocks(store: app.store, cluster: app.cluster, streams: app.streams)
        self.blocks = blocks
        if let cluster = app.cluster {
            let logger = app.logger
            cluster.on(Self.blocksChanged) { users in
                do {
                    try await blocks.heard(users)
                } catch {
                    logger.warning("a block made elsewhere could not be read: open streams here keep their old one", metadata: ["error": "\(error)"])
                }
            }
            cluster.onGap { blocks.forgetAll() }
            cluster.onBreak { blocks.forgetAll() }
        }
        app.run(ModerationGauges(storage: storage, metrics: app.metrics, logger: app.logger))
        app.run(Pruning(what: "removed posts", interval: .seconds(3600), logger: app.logger) {
            _ = try await storage.purgeRemovedPosts(before: Date().addingTimeInterval(-Self.restorable))
        })
    }

    func addRoutes(to router: FoyerRouter, views: Views, signIn: SignIn, posts: PostRepository) {
        TermsController(terms: terms, storage: termsStorage, views: views, signIn: signIn).addRoutes(to: router)
        ReportsController(storage: reports, posts: posts, users: signIn.users, views: views, mail: mail.accountMail, outbox: mail.sender).addRoutes(to: router)
        ModerationController(
            storage: storage, posts: posts, users: signIn.users, signIn: signIn, views: views,
            mail: ModerationMail(mail: mail.accountMail, contactEmail: terms.contactEmail), outbox: mail.sender, metrics: metrics
        ).addRoutes(to: router)
        BlocksController(blocks: blocks, users: signIn.users, moderation: storage, views: views).addRoutes(to: router)
        ProfilesController(users: signIn.users, posts: posts, views: views).addRoutes(to: router)
    }
}

/// The queue's gauges, read from the store every few seconds, so every instance reports the same figures.
struct ModerationGauges: Service {
    let storage: any ModerationStorage
    let metrics: FoyerMetrics
    let logger: Logger
    static let interval: Duration = .seconds(10)

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await update()
                } catch {
                    logger.warning("reading the moderation queue's figures failed: \(error)")
                }
                try? await Task.sleep(for: Self.interval)
            }
        }
    }

    func update(now: Date = Date()) async throws {
        let (count, oldest) = try await storage.openReports()
        metrics.moderationOpenReports.set(to: Double(count))
        metrics.moderationOldestOpenReportAge.set(to: oldest.map { max(0, now.timeIntervalSince($0).rounded()) } ?? 0)
    }
}
