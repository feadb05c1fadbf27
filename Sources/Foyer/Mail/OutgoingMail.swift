import Foundation

/// A mail to one person, as the outbox keeps it: plain-text and HTML parts of the same words.
struct OutgoingMail: Sendable, Equatable {
    /// `<random@domain>`: the same in every attempt, so a server that took it twice can tell.
    let messageID: String
    let recipient: String
    let recipientName: String
    let subject: String
    let text: String
    let html: String

    init(messageID: String, recipient: String, recipientName: String, subject: String, text: String, html: String) {
        (self.messageID, self.recipient, self.recipientName) = (messageID, recipient, recipientName)
        (self.subject, self.text, self.html) = (subject, text, html)
    }

    init(to recipient: String, name: String, subject: String, text: String, html: String, from sender: MailAddress) {
        let domain = sender.address.split(separator: "@").last.map(String.init) ?? "foyer.localhost"
        self.init(
            messageID: "<\(SessionRepository.randomToken())@\(domain)>", recipient: recipient, recipientName: name, subject: subject,
            text: text, html: html
        )
    }

    /// The message as RFC 5322 text with CRLF line ends: `multipart/alternative`, each part UTF-8 in
    /// quoted-printable (readable in a `.eml` file, safe through any relay), non-ASCII headers as RFC 2047 words.
    func rendered(from sender: MailAddress, date: Date = Date()) -> String {
        let boundary = "foyer-" + SessionRepository.randomToken().prefix(24)
        let headers = [
            "From: " + sender.header,
            "To: " + MailAddress(name: recipientName, address: recipient).header,
            "Subject: " + MIME.encodedWord(subject),
            "Date: " + MIME.date(date),
            "Message-ID: " + messageID,
            "MIME-Version: 1.0",
            "Auto-Submitted: auto-generated",
            "Content-Type: multipart/alternative; boundary=\"\(boundary)\"",
        ]
        var lines = headers + [""]
        for (type, body) in [("text/plain", text), ("text/html", html)] {
            lines += [
                "--" + boundary, "Content-Type: \(type); charset=utf-8", "Content-Transfer-Encoding: quoted-printable", "",
                MIME.quotedPrintable(body),
            ]
        }
        lines.append("--\(boundary)--")
        return lines.joined(separator: "\r\n") + "\r\n"
    }
}

/// A name and an address, as in `From: Foyer <no-reply@example.com>`.
public struct MailAddress: Sendable, Equatable {
    public let name: String
    public let address: String

    /// `Name <address>` or a bare address.
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let open = trimmed.lastIndex(of: "<"), trimmed.hasSuffix(">") {
            let address = String(trimmed[trimmed.index(after: open)..<trimmed.index(before: trimmed.endIndex)])
            let name = trimmed[..<open].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            self.init(name: name, address: address)
        } else {
            self.init(name: "", address: trimmed)
        }
        guard UserRepository.isEmailAddress(address) else { return nil }
    }

    public init(name: String, address: String) {
        (self.name, self.address) = (name, address)
    }

    var header: String {
        guard !name.isEmpty else { return "<\(address)>" }
        return MIME.phrase(name) + " <\(address)>"
    }
}

enum MIME {
    /// A display name: quoted when it is ASCII, an RFC 2047 word when it is not.
    static func phrase(_ text: String) -> String {
        let flat = text.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
        guard flat.unicodeScalars.allSatisfy({ $0.isASCII && $0.value >= 0x20 }) else { return encodedWord(flat) }
        return "\"" + flat.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// RFC 2047 `=?utf-8?b?…?=` when the text is not plain ASCII; the text itself otherwise.
    static func encodedWord(_ text: String) -> String {
        let flat = text.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
        guard !flat.unicodeScalars.allSatisfy({ $0.isASCII && $0.value >= 0x20 }) else { return flat }
        return "=?utf-8?b?" + Data(flat.utf8).base64EncodedString() + "?="
    }

    static func date(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss '+0000'"
        return formatter.string(from: date)
    }

    /// RFC 2045 §6.7: lines of at most 76 characters, soft breaks `=`, line ends as CRLF.
    static func quotedPrintable(_ text: String) -> String {
        let normalized = text.replacingOccurrences(of: "\r\n", with: "\n")
        var output: [String] = []
        for line in normalized.split(separator: "\n", omittingEmptySubsequences: false) {
            var encoded = ""
            var width = 0
            let bytes = Array(line.utf8)
            for (index, byte) in bytes.enumerated() {
                let last = index == bytes.count - 1
                let literal = (byte >= 33 && byte <= 126 && byte != 61) || (!last && (byte == 32 || byte == 9))
                let piece = literal ? String(UnicodeScalar(byte)) : String(format: "=%02X", byte)
                if width + piece.count > 75 {
                    encoded += "=\r\n"
                    width = 0
                }
                encoded += piece
                width += piece.count
            }
            output.append(encoded)
        }
        return output.joined(separator: "\r\n")
    }
}
