import Foundation

/// Foyer's mail: an outbox in the store and one sender per instance, delivering to the SMTP server of
/// `--smtp-url`, or without one to a folder of `.eml` files beside the database.
struct MailFeature {
    let sender: MailSender
    let settings: MailSettings
    /// Where links in mail point.
    let origin: String
    /// Mail is written in each recipient's language.
    let languages: Languages

    init(_ app: Foundations) {
        let config = app.config
        settings = config.mail
        languages = app.views.languages
        let delivery: any MailDelivery = if let smtp = settings.smtp {
            SMTPDelivery(server: smtp)
        } else {
            MailFolder(path: settings.folder ?? Self.defaultFolder(databasePath: config.databasePath), logger: app.logger)
        }
        sender = MailSender(outbox: app.store.mailOutboxStorage, delivery: delivery, sender: settings.from, metrics: app.metrics, logger: app.logger)
        let host = ["0.0.0.0", "::", ""].contains(config.hostname) ? "localhost" : config.hostname
        origin = settings.publicURL ?? "http://\(host.contains(":") ? "[\(host)]" : host):\(config.port)"
        app.run(sender)
    }

    var accountMail: AccountMail { AccountMail(origin: origin, sender: settings.from, languages: languages) }

    /// `foyer-mail/` beside a SQLite file; the working directory's for `:memory:` and PostgreSQL.
    static func defaultFolder(databasePath: String) -> String {
        guard databasePath != ":memory:", !databasePath.contains("://") else { return "foyer-mail" }
        return URL(fileURLWithPath: databasePath).deletingLastPathComponent().appendingPathComponent("foyer-mail").path
    }
}
