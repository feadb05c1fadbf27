import Foundation
import FoyerServer
import Ink

/// The terms people accept before they post: the operator's file, or Foyer's built-in text. Each text is a version
/// of its own (a digest of it), in force from the moment an instance first served it; an account has accepted the
/// current terms when it said yes after that moment.
struct Terms: Sendable {
    /// The first 16 hex digits of the HTML's SHA-256: a changed file is a new version.
    let version: String
    let html: String
    /// Acceptance before this moment was of older terms. The first terms a database ever had are in force from
    /// the beginning: an account vouched for before any instance ran (`foyer user add`) accepted those.
    let effectiveAt: Date
    let contactEmail: String

    static let path = "/terms"

    /// The operator's file (Markdown by its extension, else HTML) or the built-in terms, rendered once at start.
    static func text(settings: ModerationSettings, views: Views) throws -> String {
        guard let file = settings.termsFile else {
            // One text, one version: the built-in terms are in the default language.
            return views.render("terms/builtin", ["contact_email": settings.contactEmail], in: views.languages.fallback)
        }
        let source: String
        do {
            source = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw StartupError("--terms-file \(file) cannot be read: \(error.localizedDescription)")
        }
        guard !source.isBlank else { throw StartupError("--terms-file \(file) is empty") }
        let ext = URL(fileURLWithPath: file).pathExtension.lowercased()
        return ["md", "markdown"].contains(ext) ? MarkdownParser().html(from: source) : source
    }

    static func version(of html: String) -> String {
        String(html.sha256Hex.prefix(16))
    }

    func isAccepted(by user: User) -> Bool {
        guard let accepted = user.termsAcceptedAt else { return false }
        return accepted >= effectiveAt
    }

    /// Throws the refusal that shows the terms (an accept button on the web, `403 terms_not_accepted` in JSON).
    func requireAccepted(by identity: Identity) throws {
        guard isAccepted(by: identity.user) else { throw TermsNotAccepted(terms: self, identity: identity) }
    }
}

/// Someone who has not accepted the current terms tried to post: they may read, not write, until they do.
struct TermsNotAccepted: Error {
    let terms: Terms
    /// Who asked: the error middleware runs outside authentication, and the page it shows needs their form token.
    let identity: Identity
    static let message = Phrase("terms.errors.not_accepted")
}
