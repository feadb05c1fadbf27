import Foundation
import Testing

@testable import Foyer
@testable import FoyerServer

/// HTTPS settings and the plain port's redirect. (TLS itself, renewals and the redirect over a socket are tested
/// with curl and Python's ssl against the real binary: Tests/Interop/test_https.py.)
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
}
