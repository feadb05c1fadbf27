import ArgumentParser
import Foundation

/// What an operator says about content people post: the terms they accept first and where to reach the operator.
public struct ModerationSettings: Sendable {
    /// The operator's terms, Markdown (`.md`, `.markdown`) or HTML; nil: Foyer's built-in terms.
    public var termsFile: String?
    /// Where people write to the operator (appeals, concerns): shown on `/contact`, the terms and the mail Foyer sends.
    public var contactEmail = "moderation@foyer.localhost"
    /// Lines `block: WORD` and `review: WORD` (`WatchedWords`); nil: none.
    public var watchedWordsFile: String?

    public init() {}
}

/// The moderation flags of `foyer serve`; each has an environment variable, and a flag wins over its variable.
public struct ModerationOptions: ParsableArguments {
    @Option(help: "The terms people accept before they post, Markdown (.md) or HTML (env FOYER_TERMS_FILE; default: Foyer's built-in terms, which allow no objectionable content and no abusive users)")
    var termsFile: String?

    @Option(help: "The address people write to about content and appeals, shown on /contact (env FOYER_CONTACT_EMAIL; default moderation@foyer.localhost)")
    var contactEmail: String?

    @Option(help: "Words watched for in posts, a line each: `block: WORD` refuses a post with it, `review: WORD` holds the post for a moderator (env FOYER_WATCHED_WORDS; default none)")
    var watchedWords: String?

    public init() {}

    public func settings(environment: [String: String]) throws -> ModerationSettings {
        var settings = ModerationSettings()
        settings.termsFile = (termsFile ?? environment["FOYER_TERMS_FILE"]).flatMap { $0.isEmpty ? nil : $0 }
        settings.watchedWordsFile = (watchedWords ?? environment["FOYER_WATCHED_WORDS"]).flatMap { $0.isEmpty ? nil : $0 }
        if let contact = (contactEmail ?? environment["FOYER_CONTACT_EMAIL"]).flatMap({ $0.isEmpty ? nil : $0 }) {
            guard UserRepository.isEmailAddress(contact) else {
                throw ValidationError("--contact-email: \"\(contact)\" is not an email address")
            }
            settings.contactEmail = contact
        }
        return settings
    }
}
