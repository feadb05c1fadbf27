import Crypto
import Foundation
import Testing

@testable import Foyer

/// The CBOR reader, against RFC 8949's own examples (Appendix A), and the parts of WebAuthn that need no store.
@Suite struct PasskeysTests {
    static func hex(_ text: String) -> [UInt8] {
        stride(from: 0, to: text.count, by: 2).map { UInt8(text.dropFirst($0).prefix(2), radix: 16)! }
    }

    @Test(arguments: [
        ("00", CBOR.unsigned(0)), ("17", .unsigned(23)), ("1818", .unsigned(24)), ("1903e8", .unsigned(1000)),
        ("1b000000e8d4a51000", .unsigned(1_000_000_000_000)), ("1bffffffffffffffff", .unsigned(UInt64.max)),
        ("20", .negative(0)), ("3863", .negative(99)), ("3903e7", .negative(999)),
        ("f4", .bool(false)), ("f5", .bool(true)), ("f6", .null), ("f7", .undefined), ("f0", .simple(16)), ("f8ff", .simple(255)),
        ("f93c00", .float(1.0)), ("f97bff", .float(65504.0)), ("fa47c35000", .float(100000.0)), ("fb3ff199999999999a", .float(1.1)),
        ("f90001", .float(5.960464477539063e-8)), ("f9c400", .float(-4.0)), ("f97c00", .float(.infinity)),
        ("40", .bytes([])), ("4401020304", .bytes([1, 2, 3, 4])), ("60", .text("")), ("6161", .text("a")),
        ("6449455446", .text("IETF")), ("62225c", .text("\"\\")), ("62c3bc", .text("ü")), ("63e6b0b4", .text("水")),
        ("80", .array([])), ("83010203", .array([.unsigned(1), .unsigned(2), .unsigned(3)])),
        ("8301820203820405", .array([.unsigned(1), .array([.unsigned(2), .unsigned(3)]), .array([.unsigned(4), .unsigned(5)])])),
        ("a0", .map([])),
        ("a201020304", .map([.init(key: .unsigned(1), value: .unsigned(2)), .init(key: .unsigned(3), value: .unsigned(4))])),
        ("a26161016162820203", .map([
            .init(key: .text("a"), value: .unsigned(1)), .init(key: .text("b"), value: .array([.unsigned(2), .unsigned(3)])),
        ])),
        ("c074323031332d30332d32315432303a30343a30305a", .tagged(0, .text("2013-03-21T20:04:00Z"))),
        ("d74401020304", .tagged(23, .bytes([1, 2, 3, 4]))),
    ])
    func theRFCsExamplesReadAsTheRFCSays(encoded: String, expected: CBOR) throws {
        #expect(try CBOR.decode(Self.hex(encoded)) == expected)
    }

    /// A NaN is never equal to itself: read apart.
    @Test func halfPrecisionNaNIsNaN() throws {
        guard case .float(let value) = try CBOR.decode(Self.hex("f97e00")) else { Issue.record("not a float"); return }
        #expect(value.isNaN)
    }

    @Test(arguments: [
        ("", "ends inside"), ("5f42010243030405ff", "indefinite"), ("1c", "reserved"), ("44010203", "longer than its input"),
        ("9b00000000ffffffff", "longer than its input"), ("0000", "follow"), ("62c328", "UTF-8"), ("f818", "below 32"),
        (String(repeating: "81", count: 40) + "00", "nested deeper"), ("ff", "break"),
    ])
    func whatIsNotCBORIsRefusedSayingWhy(encoded: String, why: String) {
        #expect {
            _ = try CBOR.decode(Self.hex(encoded))
        } throws: { error in
            (error as? CBORError)?.description.contains(why) == true
        }
    }

    /// The COSE key of a P-256 key, as an authenticator writes it.
    static func coseKey(_ key: P256.Signing.PublicKey) -> [UInt8] {
        let raw = Array(key.rawRepresentation)
        return [0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20] + raw[0..<32] + [0x22, 0x58, 0x20] + raw[32..<64]
    }

    static func authenticatorData(rpID: String = "example.com", flags: UInt8, counter: UInt32 = 0, credential: (id: [UInt8], key: [UInt8])? = nil) -> [UInt8] {
        var bytes = Array(SHA256.hash(data: Array(rpID.utf8))) + [flags] + withUnsafeBytes(of: counter.bigEndian, Array.init)
        if let credential {
            bytes += [UInt8](repeating: 0, count: 16) + [UInt8(credential.id.count >> 8), UInt8(credential.id.count & 0xFF)] + credential.id + credential.key
        }
        return bytes
    }

    @Test func authenticatorDataIsReadFieldByFieldAndItsLimitsHold() throws {
        let key = P256.Signing.PrivateKey().publicKey
        let data = try AuthenticatorData(Self.authenticatorData(flags: 0x5D, counter: 7, credential: ([1, 2, 3], Self.coseKey(key))))
        #expect(data.userPresent && data.userVerified && data.backupEligible && data.backedUp && data.signCount == 7)
        #expect(data.credential?.id == [1, 2, 3] && data.credential?.publicKey == Self.coseKey(key))
        #expect(try COSEKey(Self.coseKey(key)).algorithm == .es256)
        // 1,023 bytes of credential id are accepted, 1,024 are not.
        _ = try AuthenticatorData(Self.authenticatorData(flags: 0x45, credential: ([UInt8](repeating: 9, count: 1023), Self.coseKey(key))))
        #expect(throws: WebAuthnRefusal.self) {
            try AuthenticatorData(Self.authenticatorData(flags: 0x45, credential: ([UInt8](repeating: 9, count: 1024), Self.coseKey(key))))
        }
        #expect(throws: WebAuthnRefusal.self) { try AuthenticatorData(Array(Self.authenticatorData(flags: 0x05).dropLast())) }
        #expect(throws: WebAuthnRefusal.self) { try AuthenticatorData(Self.authenticatorData(flags: 0x05) + [0]) }
    }

    /// An assertion is checked against the RP ID, the origins, both flags and the stored key; each lie is named.
    @Test func anAssertionIsRefusedForEachThingThatIsWrong() throws {
        let signer = P256.Signing.PrivateKey()
        let publicKey = Self.coseKey(signer.publicKey)
        let verifier = WebAuthnVerifier(rpID: "example.com", origins: ["https://example.com"])
        func assertion(origin: String = "https://example.com", type: String = "webauthn.get", rpID: String = "example.com", flags: UInt8 = 0x05, crossOrigin: Bool = false, signedBy key: P256.Signing.PrivateKey? = nil) throws -> (ClientData, AuthenticatorData) {
            let client = Array(#"{"type":"\#(type)","challenge":"AAAAAAAAAAAAAAAAAAAAAA","origin":"\#(origin)","crossOrigin":\#(crossOrigin),"extra":1}"#.utf8)
            let data = Self.authenticatorData(rpID: rpID, flags: flags, counter: 1)
            let signature = try (key ?? signer).signature(for: data + Array(SHA256.hash(data: client)))
            return try verifier.assertion(clientDataJSON: client, authenticatorData: data, signature: Array(signature.derRepresentation), publicKey: publicKey)
        }
        #expect(try assertion().1.signCount == 1)
        for (lie, why): (() throws -> Any, String) in [
            ({ try assertion(origin: "https://example.com.evil") }, "not this site"),
            ({ try assertion(type: "webauthn.create") }, "not webauthn.get"),
            ({ try assertion(rpID: "evil.com") }, "another relying party"),
            ({ try assertion(flags: 0x04) }, "UP flag"),
            ({ try assertion(flags: 0x01) }, "UV flag"),
            ({ try assertion(crossOrigin: true) }, "crossOrigin"),
            ({ try assertion(signedBy: P256.Signing.PrivateKey()) }, "signature does not verify"),
        ] {
            #expect { _ = try lie() } throws: { ($0 as? WebAuthnRefusal)?.description.contains(why) == true }
        }
    }

    @Test func fingerprintsAndAppIDsAreReadAsTheStoresPrintThem() {
        let fingerprint = (0..<32).map { String(format: "%02X", $0) }.joined(separator: ":")
        #expect(PasskeySettings.fingerprintBytes(fingerprint) == Array(0..<32))
        #expect(PasskeySettings.fingerprintBytes("AB:CD") == nil)
        var settings = PasskeySettings()
        settings.androidCertificateFingerprints = [fingerprint]
        #expect(settings.androidOrigins == ["android:apk-key-hash:" + Data(Array(0..<32)).base64URLEncoded])
        #expect(PasskeySettings.isAppID("ABCDE12345.com.example.app") && !PasskeySettings.isAppID("com.example.app"))
    }

    /// An account made to sign in with a passkey has no password any guess can match, its marker included, until a
    /// reset mail sets one.
    @Test(arguments: TestStoreKind.allCases) func anAccountMadeForAPasskeyHasNoPasswordToGuess(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let users = UserRepository(store: store, passwordHashCost: 4)
        let user = try await users.signUp(name: "Pat", email: "pat@example.com", password: nil, acceptsTerms: true) { _ in AccountWrites() }
        #expect(user.passwordHash == User.passkeyOnly && user.hasLocalPassword && !user.hasPassword)
        for guess in [User.passkeyOnly, "", "correct horse battery"] {
            #expect(try await users.authenticate(email: "pat@example.com", password: guess) == nil, "\(guess)")
        }
    }

    /// An account deleted takes its passkeys, its user handle and its ceremonies with it.
    @Test(arguments: TestStoreKind.allCases) func deletingAnAccountDeletesItsPasskeys(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let user = try await UserRepository(store: store, passwordHashCost: 4).create(email: TestUser.ada.email, password: TestUser.ada.password)
        let id = try #require(user.id)
        let storage = store.passkeyStorage
        let handle = try await storage.userHandle(of: id, making: "handle-1")
        #expect(try await storage.userHandle(of: id, making: "handle-2") == handle, "made once")
        let passkey = Passkey(
            id: "credential-1", userId: id, name: "Laptop", publicKey: "key", signCount: 0, backupEligible: false, backedUp: false, createdAt: Date()
        )
        #expect(try await storage.insert(passkey))
        #expect(try await !storage.insert(passkey), "a credential id is registered once")
        try await storage.keepChallenge("challenge-1", PasskeyChallenge(ceremony: .registration, userId: id, expiresAt: Date().addingTimeInterval(60)))
        _ = try await store.accountStorage.delete(userId: id, writes: AccountWrites(), now: Date())
        #expect(try await storage.passkey(id: "credential-1") == nil)
        #expect(try await storage.user(withHandle: handle) == nil)
        #expect(try await storage.takeChallenge("challenge-1") == nil)
    }
}
