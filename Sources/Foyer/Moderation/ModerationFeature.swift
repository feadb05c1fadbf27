import Foundation

/// What keeps user-generated content fit to share, as app stores ask of apps that show it: terms accepted before
/// posting, the operator's address, and reports to the moderators.
struct ModerationFeature {
    let terms: Terms
    let termsStorage: any TermsStorage
    let reports: any ReportStorage
    /// Moderators are told of each report by mail, through the outbox.
    let mail: MailFeature

    init(_ app: Foundations, mail: MailFeature) async throws {
        self.mail = mail
        reports = app.store.reportStorage
        let settings = app.config.moderation
        let html = try Terms.text(settings: settings, views: app.views)
        let version = Terms.version(of: html)
        termsStorage = app.store.termsStorage
        terms = Terms(
            version: version, html: html, effectiveAt: try await termsStorage.effectiveAt(version: version, now: Date()),
            contactEmail: settings.contactEmail
        )
    }

    func addRoutes(to router: FoyerRouter, views: Views, signIn: SignIn, posts: PostRepository) {
        TermsController(terms: terms, storage: termsStorage, views: views, signIn: signIn).addRoutes(to: router)
        ReportsController(storage: reports, posts: posts, views: views, mail: mail.accountMail, outbox: mail.sender).addRoutes(to: router)
    }
}
