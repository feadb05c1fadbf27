import Foundation
import Logging
import Testing

@testable import Foyer
@testable import FoyerServer

/// ACME's settings, and what instances share through the store. (Orders, challenges, renewals and two instances are
/// tested against Pebble, Let's Encrypt's test server: Tests/Interop/test_acme.py.)
@Suite struct ACMETests {
    @Test func theNamesNeedThePlainPortAndNoCertificateFiles() throws {
        let settings = try HTTPSOptions.parse(["--acme-domain", "foyer.example, www.foyer.example", "--acme-email", "ops@foyer.example", "--http-port", "80"])
            .settings(environment: [:])
        #expect(settings.acme?.domains == ["foyer.example", "www.foyer.example"])
        #expect(settings.acme?.directory == ACMESettings.letsEncrypt && settings.isOn)
        let fromEnvironment = try HTTPSOptions.parse([]).settings(
            environment: ["FOYER_ACME_DOMAINS": "a.example,b.example", "FOYER_HTTP_PORT": "80", "FOYER_ACME_DIRECTORY": "https://acme.test/dir"]
        )
        #expect(fromEnvironment.acme?.domains == ["a.example", "b.example"] && fromEnvironment.acme?.directory == "https://acme.test/dir")
        #expect(try HTTPSOptions.parse([]).settings(environment: [:]).acme == nil)
        for refused in [
            ["--acme-domain", "foyer.example"],  // no plain port to prove the name on
            ["--acme-domain", "foyer.example", "--http-port", "80", "--tls-certificate", "c.pem", "--tls-key", "k.pem"],
            ["--acme-domain", "*.foyer.example", "--http-port", "80"],
            ["--acme-domain", "192.0.2.1", "--http-port", "80"],
            ["--acme-domain", "localhost", "--http-port", "80"],
            ["--acme-email", "ops@foyer.example", "--http-port", "80", "--tls-certificate", "c.pem", "--tls-key", "k.pem"],
            ["--acme-domain", "foyer.example", "--http-port", "80", "--acme-directory", "http://acme.test/dir"],
        ] {
            #expect(throws: (any Error).self, "\(refused)") { try HTTPSOptions.parse(refused).settings(environment: [:]) }
        }
    }

    /// The CA may ask any instance behind the name for a challenge: the one that ordered keeps its answer in the store,
    /// and every other instance answers from there. A token nobody stored has no answer.
    @Test(arguments: TestStoreKind.allCases) func aChallengeStoredByAnotherInstanceIsAnswered(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let settings = try #require(try ACMESettings(domains: ["foyer.example"], email: nil, directory: nil, caCertificateFile: nil))
        let acme = try await ACMECertificates(settings: settings, store: store.acmeStorage, logger: Logger(label: "test"))
        try await store.setACMEItem("challenge some-token", Data("some-token.thumbprint".utf8))
        #expect(await acme.keyAuthorization(for: "some-token") == "some-token.thumbprint")
        #expect(await acme.keyAuthorization(for: "another-token") == nil)
        #expect(acme.issued == nil, "nothing issued yet: a self-signed stand-in is served")
        try await acme.http.shutdown()
    }

    /// Renewed with a third of its lifetime left: Let's Encrypt's 90 days with 30 to go.
    @Test func aCertificateIsRenewedWithAThirdOfItsLifetimeLeft() {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let issued = ACMECertificates.Issued(chainPEM: "", keyPEM: "", notBefore: start, notAfter: start + 90 * 86_400, serial: "1")
        #expect(issued.renewAt == start + 60 * 86_400)
    }
}
