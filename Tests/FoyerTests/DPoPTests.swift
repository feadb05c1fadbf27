import Crypto
import CryptoExtras
import Foundation
import HTTPTypes
import Testing

@testable import Foyer

/// The DPoP proof verifier field by field (RFC 9449 §4.3), the RFC 7638 thumbprint, the store that makes proofs and
/// ID tokens single-use, and sessions bound to a key, on SQLite and PostgreSQL.
@Suite struct DPoPTests {
    static let url = "https://foyer.example/api/v1/me"
    static let token = "the-session-token"

    /// An app's key and the proofs it signs, made here by hand from the RFC.
    struct AppKey {
        let key = P256.Signing.PrivateKey()

        var jwk: [String: Any] {
            let raw = key.publicKey.rawRepresentation
            return ["kty": "EC", "crv": "P-256", "x": Data(raw.prefix(32)).base64URLEncoded, "y": Data(raw.suffix(32)).base64URLEncoded]
        }

        func proof(
            method: String = "GET", url: String = DPoPTests.url, token: String? = DPoPTests.token, iat: Date = Date(), jti: String = UUID().uuidString,
            header: [String: Any] = [:], claims: [String: Any] = [:], signer: P256.Signing.PrivateKey? = nil
        ) throws -> String {
            var body: [String: Any] = ["jti": jti, "htm": method, "htu": url, "iat": Int(iat.timeIntervalSince1970)]
            if let token { body["ath"] = Data(SHA256.hash(data: Data(token.utf8))).base64URLEncoded }
            body.merge(claims) { $1 }
            let fields = ["typ": "dpop+jwt", "alg": "ES256", "jwk": jwk].merging(header) { $1 }
            let input = try [fields, body].map { try JSONSerialization.data(withJSONObject: $0).base64URLEncoded }.joined(separator: ".")
            let signature = try (signer ?? key).signature(for: Data(input.utf8)).rawRepresentation
            return input + "." + signature.base64URLEncoded
        }
    }

    private func verifier(_ kind: TestStoreKind = .sqlite) async throws -> (DPoPVerifier, Store) {
        let store = try await Store.fresh(kind)
        return (DPoPVerifier(spent: SpentCredentials(store: store)), store)
    }

    private func refusal(_ proof: String, method: String = "GET", url: String = DPoPTests.url, token: String? = DPoPTests.token) async throws -> String? {
        let (verifier, store) = try await verifier()
        defer { store.close() }
        do {
            _ = try verifier.check(proof, method: method, url: url, accessToken: token, now: Date())
            return nil
        } catch let refused as DPoPRefusal {
            #expect(refused.code == .invalidProof)
            return refused.description
        }
    }

    @Test func thumbprintsAreRFC7638s() throws {
        // RFC 7638 §3.1's example key and thumbprint.
        let jwk: [String: Any] = [
            "kty": "RSA", "e": "AQAB", "alg": "RS256", "kid": "2011-04-29",
            "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
        ]
        #expect(ProofKey.thumbprint(of: jwk) == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs")
        #expect(ProofKey.thumbprint(of: ["kty": "EC", "crv": "P-256", "x": "abc"]) == nil, "y is required")
        #expect(ProofKey.thumbprint(of: ["kty": "oct", "k": "secret"]) == nil)
    }

    @Test func aGoodProofPassesAndNamesItsKeysThumbprint() async throws {
        let app = AppKey()
        let (verifier, store) = try await verifier()
        defer { store.close() }
        let proof = try verifier.check(try app.proof(), method: "GET", url: Self.url, accessToken: Self.token, now: Date())
        #expect(proof.thumbprint == ProofKey.thumbprint(of: app.jwk))
        // At sign-in there is no token yet, and no ath.
        let signIn = try app.proof(method: "POST", url: "https://foyer.example/api/v1/sessions", token: nil)
        #expect(try verifier.check(signIn, method: "POST", url: "https://foyer.example/api/v1/sessions", accessToken: nil, now: Date()).thumbprint == proof.thumbprint)
    }

    @Test func theSameKeysNextProofIsCheckedInFullThoughItsHeaderIsKnown() async throws {
        let app = AppKey()
        let (verifier, store) = try await verifier()
        defer { store.close() }
        _ = try verifier.check(try app.proof(), method: "GET", url: Self.url, accessToken: Self.token, now: Date())
        _ = try verifier.check(try app.proof(), method: "GET", url: Self.url, accessToken: Self.token, now: Date())
        // The header is the app's (kept from before); the signature another key's.
        #expect(throws: DPoPRefusal.self) {
            try verifier.check(try app.proof(signer: P256.Signing.PrivateKey()), method: "GET", url: Self.url, accessToken: Self.token, now: Date())
        }
        #expect(throws: DPoPRefusal.self) { try verifier.check(try app.proof(method: "POST"), method: "GET", url: Self.url, accessToken: Self.token, now: Date()) }
    }

    /// RSA (RS256 and PS256) and Ed25519 keys, signed here by hand.
    @Test func rsaAndEd25519KeysSignProofsToo() async throws {
        let (verifier, store) = try await verifier()
        defer { store.close() }
        func proof(_ header: [String: Any], sign: (Data) throws -> Data) throws -> String {
            let claims: [String: Any] = ["jti": UUID().uuidString, "htm": "GET", "htu": Self.url, "iat": Int(Date().timeIntervalSince1970)]
            let input = try [header, claims].map { try JSONSerialization.data(withJSONObject: $0).base64URLEncoded }.joined(separator: ".")
            return input + "." + (try sign(Data(input.utf8))).base64URLEncoded
        }
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let components = try rsa.publicKey.getKeyPrimitives()
        let rsaJWK: [String: Any] = ["kty": "RSA", "n": components.modulus.base64URLEncoded, "e": components.publicExponent.base64URLEncoded]
        for (algorithm, padding) in [("RS256", _RSA.Signing.Padding.insecurePKCS1v1_5), ("PS256", .PSS)] {
            let signed = try proof(["typ": "dpop+jwt", "alg": algorithm, "jwk": rsaJWK]) { try rsa.signature(for: SHA256.hash(data: $0), padding: padding).rawRepresentation }
            #expect(try verifier.check(signed, method: "GET", url: Self.url, accessToken: nil, now: Date()).thumbprint == ProofKey.thumbprint(of: rsaJWK))
        }
        let mislabelled = try proof(["typ": "dpop+jwt", "alg": "PS256", "jwk": rsaJWK]) { try rsa.signature(for: SHA256.hash(data: $0), padding: .insecurePKCS1v1_5).rawRepresentation }
        #expect(throws: DPoPRefusal.self) { try verifier.check(mislabelled, method: "GET", url: Self.url, accessToken: nil, now: Date()) }

        let ed = Curve25519.Signing.PrivateKey()
        let edJWK: [String: Any] = ["kty": "OKP", "crv": "Ed25519", "x": ed.publicKey.rawRepresentation.base64URLEncoded]
        let signed = try proof(["typ": "dpop+jwt", "alg": "EdDSA", "jwk": edJWK]) { try ed.signature(for: $0) }
        #expect(try verifier.check(signed, method: "GET", url: Self.url, accessToken: nil, now: Date()).thumbprint == ProofKey.thumbprint(of: edJWK))
    }

    @Test func eachHeaderFieldIsChecked() async throws {
        let app = AppKey()
        #expect(try await refusal(try app.proof(header: ["typ": "JWT"]))?.contains("not dpop+jwt") == true)
        #expect(try await refusal(try app.proof(header: ["alg": "none"]))?.contains("signed with none") == true)
        #expect(try await refusal(try app.proof(header: ["alg": "HS256"]))?.contains("signed with HS256") == true)
        #expect(try await refusal(try app.proof(header: ["jwk": "not an object"]))?.contains("no public key") == true)
        var withPrivate = app.jwk
        withPrivate["d"] = Data(app.key.rawRepresentation).base64URLEncoded
        #expect(try await refusal(try app.proof(header: ["jwk": withPrivate]))?.contains("private key") == true)
        #expect(try await refusal(try app.proof(header: ["jwk": ["kty": "oct", "k": "c2VjcmV0"]]))?.contains("EC, RSA or OKP") == true)
        #expect(try await refusal(try app.proof(signer: P256.Signing.PrivateKey()))?.contains("signature does not verify") == true)
        #expect(try await refusal(try app.proof(header: ["alg": "RS256"]))?.contains("cannot sign RS256") == true, "an EC key")
        #expect(try await refusal(try app.proof(header: ["alg": "ES384"]))?.contains("cannot sign ES384") == true, "a P-256 key")
        var offCurve = app.jwk
        offCurve["y"] = Data(repeating: 7, count: 32).base64URLEncoded
        #expect(try await refusal(try app.proof(header: ["jwk": offCurve]))?.contains("not a valid EC P-256 public key") == true)
        #expect(try await refusal("not.a-jwt")?.contains("not a JWT") == true)
    }

    @Test func eachClaimIsChecked() async throws {
        let app = AppKey()
        #expect(try await refusal(try app.proof(jti: ""))?.contains("no jti") == true)
        #expect(try await refusal(try app.proof(method: "POST"))?.contains("(htm)") == true)
        #expect(try await refusal(try app.proof(url: "https://foyer.example/api/v1/sessions"))?.contains("(htu)") == true)
        #expect(try await refusal(try app.proof(url: "https://elsewhere.example/api/v1/me"))?.contains("(htu)") == true)
        #expect(try await refusal(try app.proof(url: "http://foyer.example/api/v1/me"))?.contains("(htu)") == true, "another scheme")
        #expect(try await refusal(try app.proof(url: "https://foyer.example:8443/api/v1/me"))?.contains("(htu)") == true, "another port")
        #expect(try await refusal(try app.proof(token: nil))?.contains("no ath") == true)
        #expect(try await refusal(try app.proof(token: "another token"))?.contains("another token") == true)
        #expect(try await refusal(try app.proof(claims: ["iat": "yesterday"]))?.contains("iat (a number)") == true)
        // The window, both sides of it, both ways.
        #expect(try await refusal(try app.proof(iat: Date().addingTimeInterval(-55))) == nil)
        #expect(try await refusal(try app.proof(iat: Date().addingTimeInterval(-65)))?.contains("ago") == true)
        #expect(try await refusal(try app.proof(iat: Date().addingTimeInterval(55))) == nil)
        #expect(try await refusal(try app.proof(iat: Date().addingTimeInterval(65)))?.contains("from now") == true)
    }

    @Test func theURLIsComparedWithoutQueryFragmentCaseOrADefaultPort() {
        #expect(DPoPVerifier.sameTarget("https://Foyer.Example:443/api/v1/me?page=2#top", Self.url))
        #expect(DPoPVerifier.sameTarget("HTTPS://foyer.example/api/v1/me", Self.url))
        #expect(DPoPVerifier.sameTarget("wss://foyer.example/graphql", "https://foyer.example/graphql"), "a websocket's upgrade request")
        #expect(DPoPVerifier.sameTarget("ws://127.0.0.1:8080/graphql", "http://127.0.0.1:8080/graphql"))
        #expect(!DPoPVerifier.sameTarget("ws://127.0.0.1:8080/graphql", "https://127.0.0.1:8080/graphql"))
        #expect(!DPoPVerifier.sameTarget("https://foyer.example/api/v1/me/", Self.url), "another path")
        #expect(!DPoPVerifier.sameTarget("/api/v1/me", Self.url), "not absolute")
    }

    @Test(arguments: TestStoreKind.allCases) func aProofIsGoodForOneRequestOnEveryInstance(kind: TestStoreKind) async throws {
        let app = AppKey()
        let (verifier, store) = try await verifier(kind)
        defer { store.close() }
        let proof = try app.proof()
        let headers: HTTPFields = [.dpop: proof]
        #expect(try await verifier.proof(in: headers, method: .get, url: Self.url, accessToken: Self.token) != nil)
        // Another instance on PostgreSQL; on SQLite (one instance) the same one after a graceful restart.
        try await verifier.spent.stop()
        let other = DPoPVerifier(spent: SpentCredentials(store: try await Store.reopen(store)))
        for instance in [verifier, other] {
            await #expect(throws: DPoPRefusal.self) { try await instance.proof(in: headers, method: .get, url: Self.url, accessToken: Self.token) }
        }
        #expect(try await verifier.proof(in: [:], method: .get, url: Self.url, accessToken: Self.token) == nil, "no proof: nothing to check")
        var two = HTTPFields()
        two.append(HTTPField(name: .dpop, value: try app.proof()))
        two.append(HTTPField(name: .dpop, value: try app.proof()))
        await #expect(throws: DPoPRefusal.self) { try await verifier.proof(in: two, method: .get, url: Self.url, accessToken: Self.token) }
    }

    @Test(arguments: TestStoreKind.allCases) func spentCredentialsAreRefusedUntilTheyExpireThenPruned(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let spent = SpentCredentials(store: store)
        let other = SpentCredentials(store: try await Store.reopen(store))
        let now = Date()
        #expect(try await spent.spend(.idToken, scope: "nanoidp", identifier: "jti-1", expiresAt: now.addingTimeInterval(60), now: now))
        #expect(try await !other.spend(.idToken, scope: "nanoidp", identifier: "jti-1", expiresAt: now.addingTimeInterval(60), now: now))
        #expect(try await spent.spend(.idToken, scope: "django", identifier: "jti-1", expiresAt: now.addingTimeInterval(60), now: now), "another issuer's")
        #expect(try await spent.spend(.nonce, scope: "nanoidp", identifier: "jti-1", expiresAt: now.addingTimeInterval(60), now: now), "another kind")
        // Expired (and not yet pruned): spendable again, for its new lifetime.
        let later = now.addingTimeInterval(61)
        #expect(try await spent.spend(.idToken, scope: "nanoidp", identifier: "jti-1", expiresAt: later.addingTimeInterval(60), now: later))
        #expect(try await !spent.spend(.idToken, scope: "nanoidp", identifier: "jti-1", expiresAt: later.addingTimeInterval(60), now: later))
        // Spends at once, many of them for the same keys: each key is spent exactly once.
        let keys = (0..<20).map { "concurrent-\($0)" }
        let firsts = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
            for key in keys + keys + keys {
                group.addTask { (key, try await (key.hasSuffix("0") ? other : spent).spend(.dpopProof, scope: "k", identifier: key, expiresAt: now.addingTimeInterval(3600), now: now)) }
            }
            return try await group.reduce(into: [String: Int]()) { counts, spend in if spend.1 { counts[spend.0, default: 0] += 1 } }
        }
        #expect(firsts == Dictionary(uniqueKeysWithValues: keys.map { ($0, 1) }))
        // Pruning takes what expired (the other two), not what is live.
        #expect(try await spent.prune(now: later) == 2)
        #expect(try await !spent.spend(.idToken, scope: "nanoidp", identifier: "jti-1", expiresAt: later.addingTimeInterval(60), now: later))
    }

    /// SQLite's one instance knows the proofs it took in memory, stores them at a graceful shutdown and reads them back
    /// at the next start; after a crash it refuses proofs made before it started, and stores those dated ahead at once.
    @Test func onSQLiteProofsAreKnownInMemoryAndAcrossRestartsCleanOrNot() async throws {
        let store = try await Store.fresh(.sqlite)
        defer { store.close() }
        // Each spend at the moment it is made: which instance started when is what this is about.
        let spend = { (credentials: SpentCredentials, jti: String, issued: Date) in
            try await credentials.spend(.dpopProof, scope: "thumb", identifier: jti, issuedAt: issued, expiresAt: issued.addingTimeInterval(61), now: Date())
        }
        let before = Date().addingTimeInterval(-10)
        let first = SpentCredentials(store: store)
        // A store never stopped cleanly (here: new) takes only proofs made since it started.
        #expect(try await !spend(first, "made before the start", before))
        #expect(try await spend(first, "taken", Date()))
        #expect(try await !spend(first, "taken", Date()), "known in memory")
        #expect(try await spend(first, "dated ahead", Date().addingTimeInterval(30)))

        // A crash: nothing was stored but the proof dated ahead, which the start rule would not have covered.
        let afterCrash = SpentCredentials(store: store)
        let fresh = Date()
        #expect(try await !spend(afterCrash, "dated ahead", Date().addingTimeInterval(30)))
        #expect(try await !spend(afterCrash, "taken", before), "made before the start: refused, whether it was taken or not")
        #expect(try await spend(afterCrash, "fresh", fresh))

        // A graceful shutdown stores what memory knows; the next start knows it and needs no start rule.
        try await afterCrash.stop()
        let afterDeploy = SpentCredentials(store: store)
        #expect(try await !spend(afterDeploy, "fresh", fresh))
        #expect(try await spend(afterDeploy, "made before this start, never taken", before))
        // The mark vouches for one start only: a crash after it is a crash again.
        #expect(try await !spend(SpentCredentials(store: store), "another made before", before))
    }

    @Test(arguments: TestStoreKind.allCases) func aBoundSessionsTokensAreFoundEachAsWhatItIs(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await UserRepository(store: store, passwordHashCost: 4).create(email: "ada@example.com", password: "long enough")
        let sessions = SessionRepository(store: store)
        let (session, token, cookieToken) = try await sessions.create(for: ada, userAgent: "App", ipAddress: nil, dpopThumbprint: "thumb")
        #expect(session.isBoundToDeviceKey && token != cookieToken)
        let byToken = try #require(try await sessions.lookup(token: token))
        #expect(byToken.session.dpopThumbprint == "thumb" && !byToken.isCookieToken)
        #expect(try await sessions.lookup(token: cookieToken)?.isCookieToken == true)
        // Another instance, without the first one's cache: the same answers from the store.
        let other = SessionRepository(store: try await Store.reopen(store))
        #expect(try await other.lookup(token: cookieToken)?.isCookieToken == true)
        #expect(try await other.lookup(token: token)?.isCookieToken == false)

        let renewed = try await sessions.renewCookieToken(of: session)
        #expect(try await sessions.lookup(token: cookieToken) == nil, "the cookie before is replaced")
        #expect(try await sessions.lookup(token: renewed)?.isCookieToken == true)
        #expect(try await sessions.revoke(id: session.id, userId: ada.id!))
        #expect(try await sessions.lookup(token: token) == nil)
        #expect(try await sessions.lookup(token: renewed) == nil)

        let (unbound, plain, same) = try await sessions.create(for: ada, userAgent: nil, ipAddress: nil, dpopThumbprint: nil)
        #expect(!unbound.isBoundToDeviceKey && plain == same)
        #expect(try await sessions.lookup(token: plain)?.isCookieToken == false)
    }
}
