import Crypto
import Foundation
import HummingbirdTesting
import Testing
import X509

@testable import Foyer
@testable import FoyerServer

/// HTTPS settings, the plain port's redirect, and the server Hummingbird's test clients run. (TLS itself, renewals
/// and the redirect over a socket are tested with curl and Python's ssl against the real binary:
/// Tests/Interop/test_https.py.)
@Suite struct HTTPSTests {
    @Test func theCertificateNeedsItsKeyAndThePlainPortNeedsHTTPS() throws {
        let both = try HTTPSOptions.parse(["--tls-certificate", "c.pem", "--tls-key", "k.pem", "--http-port", "80"]).settings(environment: [:])
        #expect(both.certificateFile == "c.pem" && both.keyFile == "k.pem" && both.plainHTTPPort == 80 && both.isOn)
        let fromEnvironment = try HTTPSOptions.parse([]).settings(
            environment: ["FOYER_TLS_CERTIFICATE": "c.pem", "FOYER_TLS_KEY": "k.pem", "FOYER_HTTP_PORT": "8080"]
        )
        #expect(fromEnvironment.plainHTTPPort == 8080)
        #expect(try HTTPSOptions.parse([]).settings(environment: [:]).isOn == false)
        #expect(throws: (any Error).self) { try HTTPSOptions.parse(["--tls-certificate", "c.pem"]).settings(environment: [:]) }
        #expect(throws: (any Error).self) { try HTTPSOptions.parse(["--http-port", "80"]).settings(environment: [:]) }
        #expect(throws: (any Error).self) {
            try HTTPSOptions.parse(["--tls-certificate", "c", "--tls-key", "k", "--http-port", "70000"]).settings(environment: [:])
        }
    }

    @Test func thePlainPortRedirectsToTheSameURLOnHTTPS() {
        #expect(HTTPSRedirect.location(host: "example.com", path: "/posts?page=2", httpsPort: 443) == "https://example.com/posts?page=2")
        #expect(HTTPSRedirect.location(host: "example.com:80", path: "/", httpsPort: 8443) == "https://example.com:8443/")
        #expect(HTTPSRedirect.location(host: "[::1]:80", path: "/up", httpsPort: 443) == "https://[::1]/up")
        #expect(HTTPSRedirect.location(host: nil, path: "/", httpsPort: 443) == nil)
        #expect(HTTPSRedirect.location(host: "evil.com/x@", path: "/", httpsPort: 443) == nil, "no host that changes the URL")
    }

    /// The test clients serve through the application's `server`, not `run()`: a client that offers h2 there gets it
    /// too (it once got HTTP/1.1 over TLS, and h2 went untested in-process).
    @Test func theServerTheTestClientsRunSpeaksHTTP2WhereTLSNegotiatesIt() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-https-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("localhost") }
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: Date() - 60, notValidAfter: Date() + 3600,
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions { SubjectAlternativeNames([.dnsName("localhost")]) }, issuerPrivateKey: .init(key)
        )
        let (certificateFile, keyFile) = (folder.appendingPathComponent("cert.pem").path, folder.appendingPathComponent("key.pem").path)
        try certificate.serializeAsPEM().pemString.write(toFile: certificateFile, atomically: true, encoding: .utf8)
        try key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)

        try await TestHarness { $0.https.certificateFile = certificateFile; $0.https.keyFile = keyFile }.test(.ahc(.https)) { client in
            let up = try await client.execute(uri: "/up", method: .get)
            #expect(up.status == .ok && up.headers[.date] != nil && up.headers[.server] == "Foyer")
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            let served = metrics.split(separator: "\n").filter { $0.hasPrefix("foyer_http_version_requests_total{") }
            #expect(served.contains { $0.hasPrefix(#"foyer_http_version_requests_total{protocol="h2"} "#) && !$0.hasSuffix(" 0") }, "\(served)")
            #expect(!served.contains { $0.hasPrefix(#"foyer_http_version_requests_total{protocol="http/1.1"} "#) && !$0.hasSuffix(" 0") }, "\(served)")
        }
    }
}
