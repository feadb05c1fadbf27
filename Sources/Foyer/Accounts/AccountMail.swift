import Foundation

/// The mail accounts get, each in plain text and HTML. Links point at the configured public URL, never at the
/// request's `Host` (a reset asked for with a forged `Host` would otherwise mail the victim a link to the forger).
/// A link opens a page; only its button changes anything, since mail scanners open every link they see.
struct AccountMail: Sendable {
    /// `https://example.com`, no trailing slash.
    let origin: String
    let sender: MailAddress
    let languages: Languages

    /// The language a person reads their mail in: their account's (set at sign-up to the language it was made in),
    /// whoever's request caused the mail.
    func language(of user: User) -> Language {
        user.locale.flatMap(languages.language(tag:)) ?? languages.fallback
    }

    /// A link to prove `address` is the account's: its own at sign-up, or the one it is changing to.
    func confirmation(for user: User, address: String, welcome: Bool, now: Date = Date()) -> AccountWrites {
        let (secret, token) = AccountToken.issue(for: user.id ?? 0, purpose: .confirmEmail, email: address, now: now)
        let language = language(of: user)
        let opening = welcome
            ? language.text("mail.welcome.opening", ["address": address]) : language.text("mail.confirm_new.opening", ["address": address])
        let mail = compose(
            to: address, name: user.name, in: language,
            subject: welcome ? language.text("mail.welcome.subject") : language.text("mail.confirm_new.subject"),
            paragraphs: [opening, language.text("mail.confirm.lifetime")],
            button: (language.text("mail.confirm.button"), "\(origin)/email_confirmations/\(secret)"),
            closing: language.text("mail.confirm.closing")
        )
        return AccountWrites(tokens: [token], mails: [mail])
    }

    func passwordReset(for user: User, now: Date = Date()) -> AccountWrites {
        let (secret, token) = AccountToken.issue(for: user.id ?? 0, purpose: .resetPassword, email: user.email, now: now)
        let language = language(of: user)
        var until = Date.FormatStyle(date: .abbreviated, time: .shortened, timeZone: .gmt)
        until.locale = language.locale
        let mail = compose(
            to: user.email, name: user.name, in: language, subject: language.text("mail.reset.subject"),
            paragraphs: [
                language.text("mail.reset.opening"),
                language.text("mail.reset.lifetime", ["until": token.expiresAt.formatted(until) + " UTC"]),
            ],
            button: (language.text("mail.reset.button"), "\(origin)/password_resets/\(secret)"),
            closing: language.text("mail.reset.closing")
        )
        return AccountWrites(tokens: [token], mails: [mail])
    }

    func passwordChanged(for user: User) -> AccountWrites {
        let language = language(of: user)
        return AccountWrites(mails: [compose(
            to: user.email, name: user.name, in: language, subject: language.text("mail.password_changed.subject"),
            paragraphs: [language.text("mail.password_changed.body")],
            button: nil, closing: language.text("mail.password_changed.closing", ["url": "\(origin)/password_resets/new"])
        )])
    }

    /// A new way in: if it was not the account's owner, they should know at once.
    func passkeyAdded(for user: User, name: String) -> AccountWrites {
        let language = language(of: user)
        return AccountWrites(mails: [compose(
            to: user.email, name: user.name, in: language, subject: language.text("mail.passkey_added.subject"),
            paragraphs: [language.text("mail.passkey_added.body", ["name": name])],
            button: nil, closing: language.text("mail.passkey_added.closing", ["url": "\(origin)/account"])
        )])
    }

    /// Told to the old address when the account moves to a new one.
    func addressChanging(for user: User, to newAddress: String) -> AccountWrites {
        let language = language(of: user)
        return AccountWrites(mails: [compose(
            to: user.email, name: user.name, in: language, subject: language.text("mail.address_changing.subject"),
            paragraphs: [language.text("mail.address_changing.body", ["address": newAddress])],
            button: nil, closing: language.text("mail.address_changing.closing", ["url": "\(origin)/account"])
        )])
    }

    func accountDeleted(for user: User) -> AccountWrites {
        let language = language(of: user)
        return AccountWrites(mails: [compose(
            to: user.email, name: user.name, in: language, subject: language.text("mail.deleted.subject"),
            paragraphs: [language.text("mail.deleted.body"), language.text("mail.deleted.farewell")],
            button: nil, closing: language.text("mail.deleted.closing")
        )])
    }

    /// A mail in both parts, in `language` (its greeting and frame; the caller's words are in it already).
    func compose(
        to address: String, name: String, in language: Language, subject: String, paragraphs: [String], button: (label: String, url: String)?,
        closing: String
    ) -> OutgoingMail {
        let hello = language.text("mail.hello", ["name": name])
        let signature = language.text("mail.signature")
        var text = hello + "\n\n" + paragraphs.joined(separator: "\n\n") + "\n\n"
        if let button { text += "\(button.label):\n\(button.url)\n\n" }
        text += closing + "\n\n-- \n\(signature)\n"
        var html = "<!doctype html><html lang=\"\(language.tag)\"><body style=\"font-family: system-ui, sans-serif; line-height: 1.5\">"
        html += "<p>\(HTML.escape(hello))</p>"
        html += paragraphs.map { "<p>\(HTML.escape($0))</p>" }.joined()
        if let button {
            let url = HTML.escape(button.url)
            html += "<p><a href=\"\(url)\" style=\"display: inline-block; padding: 0.6em 1.2em; background: #1d4ed8; color: #fff; border-radius: 6px; text-decoration: none\">\(HTML.escape(button.label))</a></p>"
            html += "<p style=\"color: #555; font-size: 0.9em; overflow-wrap: anywhere\">\(HTML.escape(language.text("mail.or_open", ["url": button.url])))</p>"
        }
        html += "<p>\(HTML.escape(closing))</p><p>— \(HTML.escape(signature))</p></body></html>"
        return OutgoingMail(to: address, name: name, subject: subject, text: text, html: html, from: sender)
    }
}
