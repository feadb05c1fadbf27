import ArgumentParser
import Foundation

/// Where mail goes: an SMTP server, or (the embedded default) `.eml` files in a folder a developer opens.
public struct MailSettings: Sendable {
    public var smtp: SMTPServer?
    public var from = MailAddress(name: "Foyer", address: "no-reply@foyer.localhost")
    /// Without SMTP: where each mail is written. Nil: beside the SQLite database (`foyer-mail/`), else the working directory.
    public var folder: String?
    /// The origin links in mail point at (`https://example.com`). Nil: where Foyer listens. Never the request's
    /// `Host`, which anyone can forge.
    public var publicURL: String?

    public init() {}

    /// `smtp://[user:password@]host[:port]` (STARTTLS whenever offered; `?starttls=required` refuses a server
    /// that offers none) or `smtps://…` (TLS from the start). The password may be percent-encoded.
    public struct SMTPServer: Sendable, CustomStringConvertible {
        /// What libcurl is given: scheme, host and port, and the EHLO name as its path.
        let url: String
        let username: String?
        let password: String?
        let requireTLS: Bool
        /// PEM roots to verify the server's certificate with, for a private CA; nil: the system's.
        var caFile: String?

        public init(parsing text: String, caFile: String?) throws {
            guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
                scheme == "smtp" || scheme == "smtps", let host = components.host, !host.isEmpty
            else {
                throw MailSettingsError("\"\(SMTPServer.redacted(text))\" is not an SMTP URL; write smtp://[user:password@]host[:port] or smtps://…")
            }
            let port = components.port ?? (scheme == "smtps" ? 465 : 587)
            let hostPart = host.contains(":") ? "[\(host)]" : host
            url = "\(scheme)://\(hostPart):\(port)/foyer"
            username = components.percentEncodedUser?.removingPercentEncoding
            password = components.percentEncodedPassword?.removingPercentEncoding
            requireTLS = scheme == "smtps" || components.queryItems?.contains { $0.name == "starttls" && $0.value == "required" } == true
            self.caFile = caFile
        }

        /// The URL with no password in it, for logs.
        public var description: String { url.replacingOccurrences(of: "/foyer", with: "") + (username.map { " as \($0)" } ?? "") }

        static func redacted(_ text: String) -> String {
            guard var components = URLComponents(string: text), components.password != nil else { return text }
            components.percentEncodedPassword = "***"
            return components.string ?? text
        }
    }
}

public struct MailSettingsError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// The mail flags of `foyer serve`; each has an environment variable, and a flag wins over its variable.
public struct MailOptions: ParsableArguments {
    @Option(help: "SMTP server for Foyer's mail: smtp://[user:password@]host[:port] (STARTTLS whenever offered) or smtps://… (env FOYER_SMTP_URL; default: no SMTP, each mail is written to a folder beside the database and logged)")
    var smtpURL: String?

    @Option(name: .customLong("smtp-ca-certificate"), help: "PEM file of the roots that sign the SMTP server's certificate, for a private CA (env FOYER_SMTP_CA_CERTIFICATE; default: the system's)")
    var smtpCACertificate: String?

    @Option(help: "Who Foyer's mail comes from, e.g. 'Foyer <no-reply@example.com>' (env FOYER_MAIL_FROM; default Foyer <no-reply@foyer.localhost>)")
    var mailFrom: String?

    @Option(help: "The origin links in mail point at, e.g. https://example.com (env FOYER_PUBLIC_URL; default: http:// and the address Foyer listens on)")
    var publicURL: String?

    @Option(help: "Without SMTP: the folder each mail is written to as an .eml file (env FOYER_MAIL_FOLDER; default foyer-mail/ beside the SQLite database)")
    var mailFolder: String?

    public init() {}

    public func settings(environment: [String: String]) throws -> MailSettings {
        var settings = MailSettings()
        if let url = (smtpURL ?? environment["FOYER_SMTP_URL"]).flatMap({ $0.isEmpty ? nil : $0 }) {
            do {
                settings.smtp = try .init(parsing: url, caFile: smtpCACertificate ?? environment["FOYER_SMTP_CA_CERTIFICATE"])
            } catch let error as MailSettingsError {
                throw ValidationError("--smtp-url: \(error)")
            }
        }
        if let from = mailFrom ?? environment["FOYER_MAIL_FROM"] {
            guard let address = MailAddress(parsing: from) else {
                throw ValidationError("--mail-from: \"\(from)\" is not an address; write e.g. 'Foyer <no-reply@example.com>'")
            }
            settings.from = address
        }
        settings.folder = mailFolder ?? environment["FOYER_MAIL_FOLDER"]
        if let url = publicURL ?? environment["FOYER_PUBLIC_URL"] {
            guard let components = URLComponents(string: url), ["http", "https"].contains(components.scheme?.lowercased() ?? ""),
                components.host?.isEmpty == false, components.query == nil
            else {
                throw ValidationError("--public-url: \"\(url)\" is not an origin; write e.g. https://example.com")
            }
            settings.publicURL = url.hasSuffix("/") ? String(url.dropLast()) : url
        }
        return settings
    }
}
