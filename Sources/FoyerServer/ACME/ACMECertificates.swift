import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOSSL
import ServiceLifecycle
import SwiftASN1
import X509

/// HTTPS with a certificate Foyer gets itself from an ACME server (`--acme-domain`), kept in the store with its key
/// and the account's key, so that every instance on one PostgreSQL serves the same one and only one orders or renews
/// it (under a lease). Ordered at start when the store has none, renewed when a third of its lifetime is left, and
/// served to new connections as soon as it is issued; a failed order is retried with backoff while a certificate
/// still valid goes on being served. Until the first is issued, a self-signed one stands in (logged).
final class ACMECertificates: ServedCertificates {
    /// How often an instance that is not ordering looks in the store for a certificate another one got.
    static let storeCheck: Duration = .seconds(5)

    struct Issued: Sendable, Equatable {
        let chainPEM: String
        let keyPEM: String
        let notBefore: Date
        let notAfter: Date
        let serial: String

        /// A third of its lifetime before it expires (Let's Encrypt's 90 days: renewed with 30 left).
        var renewAt: Date { notAfter - notAfter.timeIntervalSince(notBefore) / 3 }
    }

    let settings: ACMESettings
    private let store: ACMEStorage
    private let logger: Logger
    /// Shut down when `run` ends.
    let http: HTTPClient
    private let served: NIOLockedValueBox<(context: NIOSSLContext, issued: Issued?)>
    /// Challenge tokens this instance is answering, and their key authorizations.
    private let challenges = NIOLockedValueBox<[String: String]>([:])

    init(settings: ACMESettings, store: ACMEStorage, logger: Logger) async throws {
        (self.settings, self.store, self.logger) = (settings, store, logger)
        var tls = TLSConfiguration.makeClientConfiguration()
        if let file = settings.caCertificateFile {
            do {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(file))
            } catch {
                throw StartupError("--acme-ca-certificate: \(file) holds no PEM certificate (\(error))")
            }
        }
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls, redirectConfiguration: .disallow))
        if let stored = try await Self.stored(settings, in: store) {
            served = NIOLockedValueBox((try Self.context(stored), stored))
            logger.info("HTTPS with the certificate kept in the store", metadata: Self.metadata(stored, settings))
        } else {
            served = NIOLockedValueBox((try Self.selfSigned(settings.domains), nil))
            logger.notice("No certificate for \(settings.domains.joined(separator: ", ")) yet: a self-signed one stands in until \(settings.directory) issues one")
        }
    }

    var context: NIOSSLContext { served.withLockedValue { $0.context } }
    var issued: Issued? { served.withLockedValue { $0.issued } }

    /// The HTTP-01 answer for `token` (the plain port asks): this instance's, or another's from the store (the CA may
    /// ask any instance behind the name).
    func keyAuthorization(for token: String) async -> String? {
        if let known = challenges.withLockedValue({ $0[token] }) { return known }
        return try? await store.item("challenge " + token).map { String(decoding: $0, as: UTF8.self) }
    }

    func run() async {
        await cancelWhenGracefulShutdown { await self.keepRenewed() }
        try? await http.shutdown()
    }

    private func keepRenewed() async {
        var failures = 0
        while !Task.isCancelled {
            await adoptStored()
            let due = issued.map { Date() >= $0.renewAt } ?? true
            if due {
                do {
                    if try await !obtainUnderLease() {
                        // Another instance is ordering: its certificate will be in the store.
                        if (try? await Task.sleep(for: .seconds(1))) == nil { return }
                        continue
                    }
                    failures = 0
                } catch is CancellationError {
                    return
                } catch {
                    failures += 1
                    // 5 s, 10 s, 20 s… up to an hour; the certificate served meanwhile stays.
                    let wait = Duration.seconds(min(3600, 5 * (1 << min(failures - 1, 10))))
                    logger.error(
                        "The ACME order failed; trying again in \(wait)", metadata: ["error": "\(error)", "directory": "\(settings.directory)"]
                    )
                    if (try? await Task.sleep(for: wait)) == nil { return }
                    continue
                }
            }
            let untilRenewal = issued.map { max(0, $0.renewAt.timeIntervalSinceNow) } ?? 0
            if (try? await Task.sleep(for: min(Self.storeCheck, .seconds(untilRenewal)))) == nil { return }
        }
    }

    /// A certificate another instance stored (or this one, before a restart), once it differs from the one served.
    private func adoptStored() async {
        guard let stored = try? await Self.stored(settings, in: store), stored != issued else { return }
        do {
            let context = try Self.context(stored)
            served.withLockedValue { $0 = (context, stored) }
            logger.info("HTTPS with the certificate another instance got", metadata: Self.metadata(stored, settings))
        } catch {
            logger.error("The certificate in the store does not load", metadata: ["error": "\(error)"])
        }
    }

    /// One instance orders at a time: on PostgreSQL under a lease, which the others see taken and wait out (they
    /// then find the new certificate in the store). False when another instance holds it.
    private func obtainUnderLease() async throws -> Bool {
        try await store.underLease("acme " + settings.storeName) { try await self.obtainIfStillDue() }
    }

    private func obtainIfStillDue() async throws {
        if let stored = try await Self.stored(settings, in: store), Date() < stored.renewAt {
            await adoptStored()
            return
        }
        let issued = try await order()
        try await store.setItem("certificate " + settings.storeName, try JSONEncoder().encode(StoredCertificate(issued)))
        let context = try Self.context(issued)
        served.withLockedValue { $0 = (context, issued) }
        logger.notice("Certificate issued: new connections get it", metadata: Self.metadata(issued, settings))
    }

    /// RFC 8555 §7: the account, an order, each name proven over HTTP-01, the CSR, the certificate.
    private func order() async throws -> Issued {
        let accountName = "account " + settings.directory
        let account = try await store.item(accountName).flatMap { try? JSONDecoder().decode(StoredAccount.self, from: $0) }
        let accountKey = try account.map { try P256.Signing.PrivateKey(pemRepresentation: $0.key) } ?? P256.Signing.PrivateKey()
        var client = ACMEClient(http: http, directoryURL: settings.directory, accountKey: accountKey, accountURL: account?.url)
        if account == nil {
            let url = try await client.account(email: settings.email)
            try await store.setItem(accountName, try JSONEncoder().encode(StoredAccount(key: accountKey.pemRepresentation, url: url)))
            logger.info("ACME account made", metadata: ["account": "\(url)"])
        }
        logger.info("Ordering a certificate", metadata: ["domains": "\(settings.domains.joined(separator: ","))", "directory": "\(settings.directory)"])
        let orderURL: String
        let order: [String: Any]
        do {
            (orderURL, order) = try await client.order(settings.domains)
        } catch let problem as ACMEClient.Problem where problem.type == "urn:ietf:params:acme:error:accountDoesNotExist" {
            // The CA no longer knows the kept account (deactivated, or a test CA started afresh): a new one next time.
            try await store.removeItem(accountName)
            throw problem
        }
        for authorization in order["authorizations"] as? [String] ?? [] {
            try await prove(authorization, with: &client)
        }
        guard let finalize = order["finalize"] as? String else { throw ACMEClient.Problem(status: 0, type: "foyer:order", detail: "the order has no finalize URL") }
        let key = P256.Signing.PrivateKey()
        try await client.post(finalize, payload: ["csr": try Self.csr(for: settings.domains, key: key).base64URLEncoded])
        let done = try await poll(orderURL, with: &client, until: "valid", what: "the order")
        guard let certificateURL = done["certificate"] as? String else {
            throw ACMEClient.Problem(status: 0, type: "foyer:order", detail: "the valid order names no certificate")
        }
        let chain = String(decoding: try await client.fetch(certificateURL).body, as: UTF8.self)
        return try Self.issued(chainPEM: chain, keyPEM: key.pemRepresentation)
    }

    /// Answers the authorization's HTTP-01 challenge on the plain port (this instance, and any other through the
    /// store) until the CA has checked it.
    private func prove(_ authorization: String, with client: inout ACMEClient) async throws {
        let details = try await client.fetch(authorization).json()
        if details["status"] as? String == "valid" { return }
        guard let challenge = (details["challenges"] as? [[String: Any]])?.first(where: { $0["type"] as? String == "http-01" }),
            let token = challenge["token"] as? String, let url = challenge["url"] as? String
        else { throw ACMEClient.Problem(status: 0, type: "foyer:challenge", detail: "the CA offers no HTTP-01 challenge for \(authorization)") }
        let answer = client.keyAuthorization(token)
        challenges.withLockedValue { $0[token] = answer }
        try await store.setItem("challenge " + token, Data(answer.utf8))
        defer {
            challenges.withLockedValue { _ = $0.removeValue(forKey: token) }
            Task { [store] in try? await store.removeItem("challenge " + token) }
        }
        try await client.post(url, payload: [:])
        _ = try await poll(authorization, with: &client, until: "valid", what: "the authorization of \(details["identifier"] ?? "")")
    }

    /// Asks again (each second, or as the CA's Retry-After says) until `url`'s status is `wanted`; throws at
    /// `invalid` with what the CA said, or after two minutes.
    private func poll(_ url: String, with client: inout ACMEClient, until wanted: String, what: String) async throws -> [String: Any] {
        let giveUpAt = ContinuousClock.now + .seconds(120)
        while true {
            let reply = try await client.fetch(url)
            let object = try reply.json()
            let status = object["status"] as? String ?? ""
            if status == wanted { return object }
            if status == "invalid" {
                let challengeErrors = (object["challenges"] as? [[String: Any]])?.compactMap { ($0["error"] as? [String: Any])?["detail"] as? String } ?? []
                let detail = ((object["error"] as? [String: Any])?["detail"] as? String).map { [$0] } ?? challengeErrors
                throw ACMEClient.Problem(status: reply.status, type: "foyer:invalid", detail: "\(what) is invalid: \(detail.joined(separator: "; "))")
            }
            guard ContinuousClock.now < giveUpAt else {
                throw ACMEClient.Problem(status: reply.status, type: "foyer:timeout", detail: "\(what) was still \(status) after two minutes")
            }
            let retryAfter = reply.headers.first(name: "Retry-After").flatMap { Int($0) }.map { min(max($0, 1), 10) } ?? 1
            try await Task.sleep(for: .seconds(retryAfter))
        }
    }

    // MARK: Certificates

    private static func csr(for domains: [String], key: P256.Signing.PrivateKey) throws -> Data {
        let request = try CertificateSigningRequest(
            version: .v1, subject: try DistinguishedName { CommonName(domains[0]) }, privateKey: .init(key),
            attributes: try CertificateSigningRequest.Attributes([
                .init(ExtensionRequest(extensions: try Certificate.Extensions { SubjectAlternativeNames(domains.map { .dnsName($0) }) }))
            ]),
            signatureAlgorithm: .ecdsaWithSHA256
        )
        var serializer = DER.Serializer()
        try serializer.serialize(request)
        return Data(serializer.serializedBytes)
    }

    /// The chain's first certificate says when it is valid and its serial.
    static func issued(chainPEM: String, keyPEM: String) throws -> Issued {
        guard let end = chainPEM.range(of: "-----END CERTIFICATE-----") else {
            throw ACMEClient.Problem(status: 0, type: "foyer:certificate", detail: "the CA's answer holds no PEM certificate")
        }
        let leaf = try Certificate(pemEncoded: String(chainPEM[..<end.upperBound]))
        return Issued(
            chainPEM: chainPEM, keyPEM: keyPEM, notBefore: leaf.notValidBefore, notAfter: leaf.notValidAfter, serial: leaf.serialNumber.description
        )
    }

    private static func context(_ issued: Issued) throws -> NIOSSLContext {
        try CertificateFiles.serverContext(chainPEM: Array(issued.chainPEM.utf8), keyPEM: Array(issued.keyPEM.utf8))
    }

    /// A day's self-signed certificate for the names: what HTTPS answers with before the CA has issued one.
    private static func selfSigned(_ domains: [String]) throws -> NIOSSLContext {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName(domains[0]) }
        let now = Date()
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: now - 60, notValidAfter: now + 86_400,
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions { SubjectAlternativeNames(domains.map { .dnsName($0) }) }, issuerPrivateKey: .init(key)
        )
        return try CertificateFiles.serverContext(chainPEM: Array(try certificate.serializeAsPEM().pemString.utf8), keyPEM: Array(key.pemRepresentation.utf8))
    }

    private static func metadata(_ issued: Issued, _ settings: ACMESettings) -> Logger.Metadata {
        ["domains": "\(settings.domains.joined(separator: ","))", "serial": "\(issued.serial)", "not_after": "\(issued.notAfter)", "renew_at": "\(issued.renewAt)"]
    }

    // MARK: The store

    private struct StoredCertificate: Codable {
        let chain: String
        let key: String

        init(_ issued: Issued) {
            (chain, key) = (issued.chainPEM, issued.keyPEM)
        }
    }

    private struct StoredAccount: Codable {
        let key: String
        let url: String
    }

    private static func stored(_ settings: ACMESettings, in store: ACMEStorage) async throws -> Issued? {
        guard let data = try await store.item("certificate " + settings.storeName) else { return nil }
        let stored = try JSONDecoder().decode(StoredCertificate.self, from: data)
        return try issued(chainPEM: stored.chain, keyPEM: stored.key)
    }
}
