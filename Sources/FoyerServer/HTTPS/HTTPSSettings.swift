import ArgumentParser
import Foundation

/// HTTPS served by Foyer itself: a certificate chain and its key from PEM files (read again when they change), and
/// a plain-HTTP port that sends everyone to https://.
public struct HTTPSSettings: Sendable {
    public var certificateFile: String?
    public var keyFile: String?
    /// Plain HTTP, beside the TLS port: everything is redirected to https:// with 308 (but ACME's HTTP-01 answers).
    public var plainHTTPPort: Int?
    /// Certificates from an ACME server instead of files.
    public var acme: ACMESettings?

    public init() {}

    public var isOn: Bool { certificateFile != nil || acme != nil }
}

/// The HTTPS flags of `foyer serve`; each has an environment variable, and a flag wins over its variable.
public struct HTTPSOptions: ParsableArguments {
    @Option(help: "PEM file of the certificate (its chain may follow it) to serve HTTPS with on --port; read again when it changes (env FOYER_TLS_CERTIFICATE)")
    var tlsCertificate: String?

    @Option(help: "PEM file of the certificate's private key (env FOYER_TLS_KEY)")
    var tlsKey: String?

    @Option(help: "With HTTPS: a plain-HTTP port that redirects every request to https:// with 308, e.g. 80 (env FOYER_HTTP_PORT)")
    var httpPort: Int?

    @Option(help: "Get the HTTPS certificate from an ACME server (Let's Encrypt) for this name; repeat it, or separate names with commas (env FOYER_ACME_DOMAINS). Needs --http-port, where the names are proven (HTTP-01)")
    var acmeDomain: [String] = []

    @Option(help: "Contact address for the ACME account (env FOYER_ACME_EMAIL)")
    var acmeEmail: String?

    @Option(help: "The ACME server's directory URL (env FOYER_ACME_DIRECTORY; default Let's Encrypt's production directory)")
    var acmeDirectory: String?

    @Option(help: "PEM file of the CA to trust for the ACME server's own HTTPS, for a private or test ACME server (env FOYER_ACME_CA_CERTIFICATE)")
    var acmeCaCertificate: String?

    public init() {}

    public func settings(environment: [String: String]) throws -> HTTPSSettings {
        var settings = HTTPSSettings()
        settings.certificateFile = (tlsCertificate ?? environment["FOYER_TLS_CERTIFICATE"]).flatMap { $0.isEmpty ? nil : $0 }
        settings.keyFile = (tlsKey ?? environment["FOYER_TLS_KEY"]).flatMap { $0.isEmpty ? nil : $0 }
        switch (settings.certificateFile, settings.keyFile) {
        case (nil, nil), (.some, .some): break
        case (.some, nil): throw ValidationError("--tls-certificate needs --tls-key (FOYER_TLS_KEY): the certificate's private key")
        case (nil, .some): throw ValidationError("--tls-key needs --tls-certificate (FOYER_TLS_CERTIFICATE)")
        }
        settings.acme = try ACMESettings(
            domains: acmeDomain.isEmpty ? (environment["FOYER_ACME_DOMAINS"].map { [$0] } ?? []) : acmeDomain,
            email: acmeEmail ?? environment["FOYER_ACME_EMAIL"], directory: acmeDirectory ?? environment["FOYER_ACME_DIRECTORY"],
            caCertificateFile: acmeCaCertificate ?? environment["FOYER_ACME_CA_CERTIFICATE"]
        )
        if settings.acme != nil, settings.certificateFile != nil {
            throw ValidationError("--acme-domain and --tls-certificate both name where the certificate comes from: give one")
        }
        if let text = httpPort.map({ String($0) }) ?? environment["FOYER_HTTP_PORT"] {
            guard let port = Int(text), (1...65_535).contains(port) else { throw ValidationError("--http-port: \"\(text)\" is not a port") }
            guard settings.isOn else { throw ValidationError("--http-port redirects to HTTPS: give --tls-certificate and --tls-key too (or --acme-domain)") }
            settings.plainHTTPPort = port
        }
        if settings.acme != nil, settings.plainHTTPPort == nil {
            throw ValidationError("--acme-domain proves each name on the plain-HTTP port (HTTP-01): give --http-port too, reachable on port 80 of each name")
        }
        return settings
    }
}
