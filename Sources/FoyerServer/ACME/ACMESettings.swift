import ArgumentParser
import Foundation

/// Certificates Foyer gets itself from an ACME server (RFC 8555; Let's Encrypt by default), proving each name with
/// HTTP-01 on the plain-HTTP port.
public struct ACMESettings: Sendable, Equatable {
    public static let letsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

    /// The names the certificate is for (the first is its subject).
    public var domains: [String]
    /// Where the CA writes about the account (expiry notices); optional, as for Let's Encrypt.
    public var email: String?
    public var directory: String = letsEncrypt
    /// A PEM file of the CA certificate(s) to trust for the ACME server's own HTTPS (a private or test CA).
    public var caCertificateFile: String?

    /// The certificate's name in the store: the same names give the same certificate, on every instance.
    var storeName: String { domains.map { $0.lowercased() }.sorted().joined(separator: ",") }

    /// nil when no name is given. Names must be DNS names (no wildcards: HTTP-01 cannot prove them).
    init?(domains: [String], email: String?, directory: String?, caCertificateFile: String?) throws {
        let names = domains.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !names.isEmpty else {
            if email != nil || directory != nil || caCertificateFile != nil {
                throw ValidationError("--acme-email, --acme-directory and --acme-ca-certificate need --acme-domain: the names to get a certificate for")
            }
            return nil
        }
        for name in names where !Self.isDNSName(name) {
            throw ValidationError("--acme-domain: \"\(name)\" is not a DNS name (HTTP-01 proves one name at a time: no wildcards, no IP addresses)")
        }
        self.domains = names
        self.email = email.flatMap { $0.isEmpty ? nil : $0 }
        if let directory, !directory.isEmpty {
            guard let url = URL(string: directory), url.scheme == "https", url.host != nil else {
                throw ValidationError("--acme-directory: \"\(directory)\" is not an https:// URL")
            }
            self.directory = directory
        }
        self.caCertificateFile = caCertificateFile.flatMap { $0.isEmpty ? nil : $0 }
    }

    private static func isDNSName(_ name: String) -> Bool {
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, name.utf8.count <= 253, !name.allSatisfy({ $0.isNumber || $0 == "." }) else { return false }
        return labels.allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63 && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        }
    }
}
