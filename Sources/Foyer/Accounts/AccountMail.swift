import Foundation

/// The mail accounts get, each in plain text and HTML. Links point at the configured public URL, never at the
/// request's `Host` (a reset asked for with a forged `Host` would otherwise mail the victim a link to the forger).
/// A link opens a page; only its button changes anything, since mail scanners open every link they see.
struct AccountMail: Sendable {
    /// `https://example.com`, no trailing slash.
    let origin: String
    let sender: MailAddress

    /// A link to prove `address` is the account's: its own at sign-up, or the one it is changing to.
    func confirmation(for user: User, address: String, welcome: Bool, now: Date = Date()) -> AccountWrites {
        let (secret, token) = AccountToken.issue(for: user.id ?? 0, purpose: .confirmEmail, email: address, now: now)
        let opening = welcome
            ? "Welcome to Foyer! Please confirm that \(address) is your address."
            : "You asked to change your Foyer account's address to \(address). Please confirm that it is yours; until then you sign in with your old address."
        let mail = compose(
            to: address, name: user.name, subject: welcome ? "Welcome to Foyer: please confirm your address" : "Confirm your new address",
            paragraphs: [opening, "The link works for 3 days."],
            button: ("Confirm my address", "\(origin)/email_confirmations/\(secret)"),
            closing: "If you did not ask for this, ignore this mail: nothing changes."
        )
        return AccountWrites(tokens: [token], mails: [mail])
    }

    func passwordReset(for user: User, now: Date = Date()) -> AccountWrites {
        let (secret, token) = AccountToken.issue(for: user.id ?? 0, purpose: .resetPassword, email: user.email, now: now)
        let mail = compose(
            to: user.email, name: user.name, subject: "Reset your Foyer password",
            paragraphs: [
                "Someone (we hope you) asked to reset the password of your Foyer account.",
                "The link works once, for one hour (until \(Views.timestamp(token.expiresAt))). Setting a new password signs you out everywhere.",
            ],
            button: ("Choose a new password", "\(origin)/password_resets/\(secret)"),
            closing: "If you did not ask for this, ignore this mail: your password stays as it is."
        )
        return AccountWrites(tokens: [token], mails: [mail])
    }

    func passwordChanged(for user: User) -> AccountWrites {
        AccountWrites(mails: [compose(
            to: user.email, name: user.name, subject: "Your Foyer password was changed",
            paragraphs: ["The password of your Foyer account was just changed, and every other device was signed out."],
            button: nil, closing: "If this was not you, reset your password at \(origin)/password_resets/new at once."
        )])
    }

    /// A new way in: if it was not the account's owner, they should know at once.
    func passkeyAdded(for user: User, name: String) -> AccountWrites {
        AccountWrites(mails: [compose(
            to: user.email, name: user.name, subject: "A passkey was added to your Foyer account",
            paragraphs: ["A passkey named “\(name)” was just added to your Foyer account. It signs in without your password."],
            button: nil, closing: "If this was not you, remove it at \(origin)/account and change your password at once."
        )])
    }

    /// Told to the old address when the account moves to a new one.
    func addressChanging(for user: User, to newAddress: String) -> AccountWrites {
        AccountWrites(mails: [compose(
            to: user.email, name: user.name, subject: "Your Foyer address is changing",
            paragraphs: ["Someone signed in to your Foyer account asked to move it to \(newAddress). It moves once that address is confirmed."],
            button: nil, closing: "If this was not you, change your password at \(origin)/account at once."
        )])
    }

    func accountDeleted(for user: User) -> AccountWrites {
        AccountWrites(mails: [compose(
            to: user.email, name: user.name, subject: "Your Foyer account is deleted",
            paragraphs: [
                "Your Foyer account is deleted, as you asked: your posts, sessions, devices and everything else Foyer held about you are gone.",
                "This is the last mail you get from us. You are welcome to sign up again with this address at any time.",
            ],
            button: nil, closing: "Goodbye, and thank you."
        )])
    }

    func compose(
        to address: String, name: String, subject: String, paragraphs: [String], button: (label: String, url: String)?, closing: String
    ) -> OutgoingMail {
        var text = "Hello \(name),\n\n" + paragraphs.joined(separator: "\n\n") + "\n\n"
        if let button { text += "\(button.label):\n\(button.url)\n\n" }
        text += closing + "\n\n-- \nFoyer\n"
        var html = "<!doctype html><html><body style=\"font-family: system-ui, sans-serif; line-height: 1.5\">"
        html += "<p>Hello \(HTML.escape(name)),</p>"
        html += paragraphs.map { "<p>\(HTML.escape($0))</p>" }.joined()
        if let button {
            let url = HTML.escape(button.url)
            html += "<p><a href=\"\(url)\" style=\"display: inline-block; padding: 0.6em 1.2em; background: #1d4ed8; color: #fff; border-radius: 6px; text-decoration: none\">\(HTML.escape(button.label))</a></p>"
            html += "<p style=\"color: #555; font-size: 0.9em; overflow-wrap: anywhere\">Or open this address: \(url)</p>"
        }
        html += "<p>\(HTML.escape(closing))</p><p>— Foyer</p></body></html>"
        return OutgoingMail(to: address, name: name, subject: subject, text: text, html: html, from: sender)
    }
}
