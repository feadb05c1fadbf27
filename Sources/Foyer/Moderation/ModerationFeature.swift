import Foundation

/// What keeps user-generated content fit to share, as app stores ask of apps that show it: terms accepted before
/// posting and the operator's address.
struct ModerationFeature {
    let terms: Terms
    let termsStorage: any TermsStorage

    init(_ app: Foundations) async throws {
        let settings = app.config.moderation
        let html = try Terms.text(settings: settings, views: app.views)
        let version = Terms.version(of: html)
        termsStorage = app.store.termsStorage
        terms = Terms(
            version: version, html: html, effectiveAt: try await termsStorage.effectiveAt(version: version, now: Date()),
            contactEmail: settings.contactEmail
        )
    }

    func addRoutes(to router: FoyerRouter, views: Views, signIn: SignIn) {
        TermsController(terms: terms, storage: termsStorage, views: views, signIn: signIn).addRoutes(to: router)
    }
}
