import CCurlSMTP
import Foundation
import Logging
import NIOPosix

/// How one mail leaves Foyer. Two ways: an SMTP server, or a folder of `.eml` files (the embedded default).
protocol MailDelivery: Sendable {
    func deliver(_ mail: OutgoingMail, from sender: MailAddress) async -> DeliveryOutcome
    /// Said once at start: where mail goes.
    var summary: String { get }
}

enum DeliveryOutcome: Sendable, Equatable {
    case delivered
    /// The server is away or answered 4xx (or 5xx about its own state): try again later.
    case failed(String)
    /// The server refused this mail for good (a 5xx about the recipient or the message): retrying cannot help.
    case rejected(String)
}

/// Hands mail to an SMTP server through libcurl, which speaks STARTTLS, AUTH and SMTPS and verifies certificates.
/// Its calls block: they run on NIO's blocking pool, one mail at a time per sender.
struct SMTPDelivery: MailDelivery {
    let server: MailSettings.SMTPServer
    static let timeoutSeconds = 30

    var summary: String { "mail goes to the SMTP server \(server)" }

    func deliver(_ mail: OutgoingMail, from sender: MailAddress) async -> DeliveryOutcome {
        let message = mail.rendered(from: sender)
        let server = self.server
        let result: foyer_smtp_result
        do {
            result = try await NIOThreadPool.singleton.runIfActive {
                var bytes = Array(message.utf8)
                return bytes.withUnsafeMutableBufferPointer { buffer in
                    buffer.withMemoryRebound(to: CChar.self) { chars in
                        foyer_smtp_send(
                            server.url, server.username, server.password, server.caFile, server.requireTLS ? 1 : 0,
                            "<\(sender.address)>", "<\(mail.recipient)>", chars.baseAddress, chars.count, Self.timeoutSeconds
                        )
                    }
                }
            }
        } catch {
            return .failed("not sent: \(error)")
        }
        if result.curl_code == 0 { return .delivered }
        let reason = withUnsafeBytes(of: result.error) { bytes in
            String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        let description = result.smtp_code > 0 ? "\(reason) (SMTP \(result.smtp_code))" : reason
        return Self.isPermanent(smtpCode: result.smtp_code) ? .rejected(description) : .failed(description)
    }

    /// 5xx refuses the message for good, except the codes about signing in (a setting to fix, not a mail to drop).
    static func isPermanent(smtpCode: Int) -> Bool {
        smtpCode >= 500 && smtpCode < 600 && ![530, 534, 535, 538].contains(smtpCode)
    }
}

/// Without an SMTP server, each mail is written as an `.eml` file (any mail program opens it) and its links are
/// logged, so every flow that mails someone can be followed on a fresh clone.
struct MailFolder: MailDelivery {
    let path: String
    let logger: Logger

    var summary: String { "no SMTP server (--smtp-url): mail is written to \(path)/ and its links are logged" }

    func deliver(_ mail: OutgoingMail, from sender: MailAddress) async -> DeliveryOutcome {
        let stamp = ISO8601DateFormatter().string(from: Date()).replacingOccurrences(of: ":", with: "")
        let name = "\(stamp)-\(mail.messageID.filter { $0.isLetter || $0.isNumber }.prefix(12)).eml"
        let file = URL(fileURLWithPath: path).appendingPathComponent(name)
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try Data(mail.rendered(from: sender).utf8).write(to: file, options: .atomic)
        } catch {
            return .failed("could not write \(file.path): \(error)")
        }
        let links = Self.links(in: mail.text)
        logger.info(
            "mail to \(mail.recipient): \(mail.subject)",
            metadata: ["file": "\(file.path)", "links": "\(links.joined(separator: " "))"]
        )
        return .delivered
    }

    static func links(in text: String) -> [String] {
        text.split(whereSeparator: { $0.isWhitespace }).map(String.init).filter { $0.hasPrefix("http://") || $0.hasPrefix("https://") }
    }
}
