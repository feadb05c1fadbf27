import ArgumentParser
import Foundation

/// HTTPS served by Foyer itself: a certificate chain and its key from PEM files (read again when they change), and
/// a plain-HTTP port that sends everyone to https://.
public struct HTTPSSettings: Sendable {
    public var certificateFile: String?
    public var keyFile: String?
    /// Plain HTTP, beside the TLS port: everything is redirected to https:// with 308.
    public var plainHTTPPort: Int?

    public init() {}

    public var isOn: Bool { certificateFile != nil }
}

/// The HTTPS flags of `foyer serve`; each has an environment variable, and a flag wins over its variable.
public struct HTTPSOptions: ParsableArguments {
    @Option(help: "PEM file of the certificate (its chain may follow it) to serve HTTPS with on --port; read again when it changes (env FOYER_TLS_CERTIFICATE)")
    var tlsCertificate: String?

    @Option(help: "PEM file of the certificate's private key (env FOYER_TLS_KEY)")
    var tlsKey: String?

    @Option(help: "With HTTPS: a plain-HTTP port that redirects every request to https:// with 308, e.g. 80 (env FOYER_HTTP_PORT)")
    var httpPort: Int?

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
        if let text = httpPort.map({ String($0) }) ?? environment["FOYER_HTTP_PORT"] {
            guard let port = Int(text), (1...65_535).contains(port) else { throw ValidationError("--http-port: \"\(text)\" is not a port") }
            guard settings.isOn else { throw ValidationError("--http-port redirects to HTTPS: give --tls-certificate and --tls-key too") }
            settings.plainHTTPPort = port
        }
        return settings
    }
}
