import Crypto
import CryptoExtras
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOSSL
import ServiceLifecycle

/// What HTTPS is served with: a TLS context for each new connection, which changes when the certificate is
/// renewed (connections already open keep theirs). Certificate files, or certificates from an ACME server.
protocol ServedCertificates: Service, Sendable {
    var context: NIOSSLContext { get }
}

/// The certificate chain and key HTTPS is served with, read from PEM files and read again when they change (a
/// renewal by certbot or an operator): new connections get the new ones within `checkInterval`, connections
/// already open keep theirs, and files that do not load are logged while the last good ones go on being served.
final class CertificateFiles: ServedCertificates {
    static let checkInterval: Duration = .seconds(2)

    struct Unusable: Error, CustomStringConvertible {
        let description: String
    }

    let certificatePath: String
    let keyPath: String
    private let logger: Logger
    /// The context new connections get, and what the files held when it was made.
    private let current: NIOLockedValueBox<(context: NIOSSLContext, files: Data)>
    /// Files that did not load, so that their error is logged once, not at every look.
    private let refused = NIOLockedValueBox<Data?>(nil)

    /// Reads the files now: a pair that does not load stops the start with a message that says why.
    init(certificate: String, key: String, logger: Logger) throws {
        (certificatePath, keyPath, self.logger) = (certificate, key, logger)
        let files = try Self.read(certificate: certificate, key: key)
        current = NIOLockedValueBox((try Self.context(files), files.fingerprint))
    }

    /// What a connection accepted now is served with.
    var context: NIOSSLContext { current.withLockedValue { $0.context } }

    func run() async {
        await cancelWhenGracefulShutdown {
            while (try? await Task.sleep(for: Self.checkInterval)) != nil { self.reloadIfChanged() }
        }
    }

    func reloadIfChanged() {
        let files: Files
        do {
            files = try Self.read(certificate: certificatePath, key: keyPath)
        } catch {
            logOnce(Data(), "The certificate files cannot be read; HTTPS goes on with the last good ones: \(error)")
            return
        }
        guard files.fingerprint != current.withLockedValue({ $0.files }) else { return }
        do {
            let context = try Self.context(files)
            current.withLockedValue { $0 = (context, files.fingerprint) }
            refused.withLockedValue { $0 = nil }
            logger.info("New certificate files: new connections get them", metadata: ["certificate": "\(certificatePath)"])
        } catch {
            logOnce(files.fingerprint, "The certificate files changed but do not load; HTTPS goes on with the last good ones: \(error)")
        }
    }

    private func logOnce(_ fingerprint: Data, _ message: String) {
        let new = refused.withLockedValue { refused in
            defer { refused = fingerprint }
            return refused != fingerprint
        }
        if new { logger.error("\(message)", metadata: ["certificate": "\(certificatePath)", "key": "\(keyPath)"]) }
    }

    private struct Files {
        let certificate: [UInt8]
        let key: [UInt8]
        var fingerprint: Data { Data(SHA256.hash(data: certificate + key)) }
    }

    private static func read(certificate: String, key: String) throws -> Files {
        func bytes(_ path: String, _ what: String) throws -> [UInt8] {
            guard let data = FileManager.default.contents(atPath: path) else { throw Unusable(description: "\(what) \(path) cannot be read") }
            return Array(data)
        }
        return Files(certificate: try bytes(certificate, "the certificate file"), key: try bytes(key, "the key file"))
    }

    /// Whether `keyPEM` is the private key of `certificate`'s public key (NIOSSL would take a pair that is not and fail
    /// every handshake); nil for a kind of key this cannot read (EC P-256/384/521 and RSA it can).
    private static func keyMatches(_ certificate: NIOSSLCertificate, keyPEM: [UInt8]) -> Bool? {
        guard let published = try? certificate.extractPublicKey().toSPKIBytes() else { return nil }
        let pem = String(decoding: keyPEM, as: UTF8.self)
        let derived: [UInt8]? =
            if let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) { Array(key.publicKey.derRepresentation) }
            else if let key = try? P384.Signing.PrivateKey(pemRepresentation: pem) { Array(key.publicKey.derRepresentation) }
            else if let key = try? P521.Signing.PrivateKey(pemRepresentation: pem) { Array(key.publicKey.derRepresentation) }
            else if let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem) { Array(key.publicKey.derRepresentation) }
            else { nil }
        return derived.map { $0 == published }
    }

    private static func context(_ files: Files) throws -> NIOSSLContext {
        try serverContext(chainPEM: files.certificate, keyPEM: files.key)
    }

    /// A server's TLS context for a PEM chain and its key: TLS 1.2 and 1.3, ALPN offering h2 and HTTP/1.1.
    static func serverContext(chainPEM: [UInt8], keyPEM: [UInt8]) throws -> NIOSSLContext {
        let files = Files(certificate: chainPEM, key: keyPEM)
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(files.certificate)
        } catch {
            throw Unusable(description: "the certificate file holds no PEM certificate (\(error))")
        }
        guard !chain.isEmpty else { throw Unusable(description: "the certificate file holds no PEM certificate") }
        do {
            key = try NIOSSLPrivateKey(bytes: files.key, format: .pem)
        } catch {
            throw Unusable(description: "the key file holds no PEM private key (\(error))")
        }
        if let matches = keyMatches(chain[0], keyPEM: files.key), !matches {
            throw Unusable(description: "the key is not the certificate's (a renewal half copied?)")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["h2", "http/1.1"]
        // A connection closing waits for the client's close_notify at most this long (NIO's default: 5 s), so that a
        // client that never sends one does not hold a shutdown that long.
        configuration.shutdownTimeout = .seconds(1)
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw Unusable(description: "the certificate and key do not go together (\(error))")
        }
    }
}
