import Crypto
import Foundation

/// A response that fails a WebAuthn check: a `4xx` saying which, never a session.
struct WebAuthnRefusal: Error, CustomStringConvertible {
    let description: String
    /// A signature counter that did not rise: a copied authenticator, or a replay (counted apart).
    var counterDidNotRise = false

    init(_ description: String, counterDidNotRise: Bool = false) {
        self.description = description
        self.counterDidNotRise = counterDidNotRise
    }
}

/// What the authenticator signed (WebAuthn Level 3, §6.1): the RP ID's hash, its flags, its counter, and at
/// registration the new credential.
struct AuthenticatorData: Sendable {
    /// A credential id longer than this is refused (WebAuthn §7.1 step 5's limit).
    static let maximumCredentialIDLength = 1023

    struct AttestedCredential: Sendable {
        let aaguid: [UInt8]
        let id: [UInt8]
        /// The COSE key's own bytes, as stored.
        let publicKey: [UInt8]
    }

    let bytes: [UInt8]
    let rpIDHash: [UInt8]
    let flags: UInt8
    let signCount: UInt32
    let credential: AttestedCredential?

    var userPresent: Bool { flags & 0x01 != 0 }
    var userVerified: Bool { flags & 0x04 != 0 }
    var backupEligible: Bool { flags & 0x08 != 0 }
    var backedUp: Bool { flags & 0x10 != 0 }

    init(_ bytes: [UInt8]) throws {
        guard bytes.count >= 37 else { throw WebAuthnRefusal("the authenticator data is shorter than 37 bytes") }
        self.bytes = bytes
        rpIDHash = Array(bytes[0..<32])
        flags = bytes[32]
        signCount = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
        var offset = 37
        if flags & 0x40 != 0 {
            guard bytes.count >= offset + 18 else { throw WebAuthnRefusal("the authenticator data ends inside its credential") }
            let aaguid = Array(bytes[offset..<offset + 16])
            let length = Int(bytes[offset + 16]) << 8 | Int(bytes[offset + 17])
            offset += 18
            guard length <= Self.maximumCredentialIDLength else {
                throw WebAuthnRefusal("the credential id is \(length) bytes long; at most \(Self.maximumCredentialIDLength) are accepted")
            }
            guard bytes.count >= offset + length else { throw WebAuthnRefusal("the authenticator data ends inside its credential id") }
            let id = Array(bytes[offset..<offset + length])
            offset += length
            var reader = CBORReader(bytes, offset: offset)
            do { _ = try reader.read() } catch { throw WebAuthnRefusal("the credential's public key is not CBOR: \(error)") }
            credential = AttestedCredential(aaguid: aaguid, id: id, publicKey: Array(bytes[offset..<reader.offset]))
            offset = reader.offset
        } else {
            credential = nil
        }
        if flags & 0x80 != 0 {
            var reader = CBORReader(bytes, offset: offset)
            do { _ = try reader.read() } catch { throw WebAuthnRefusal("the authenticator data's extensions are not CBOR: \(error)") }
            offset = reader.offset
        }
        guard offset == bytes.count else { throw WebAuthnRefusal("the authenticator data has \(bytes.count - offset) bytes too many") }
    }
}

/// The client's account of the ceremony (`clientDataJSON`, §5.8.1). Members it does not know are ignored.
struct ClientData: Decodable, Sendable {
    let type: String
    let challenge: String
    let origin: String
    let crossOrigin: Bool?

    static func read(_ bytes: [UInt8]) throws -> ClientData {
        do {
            return try JSONDecoder().decode(ClientData.self, from: Data(bytes))
        } catch {
            throw WebAuthnRefusal("clientDataJSON is not the JSON a browser sends (type, challenge, origin)")
        }
    }

    /// The challenge's bytes (base64url, no padding).
    var challengeBytes: [UInt8]? { Data(base64URLEncoded: challenge).map(Array.init) }
}

/// The checks of WebAuthn Level 3 §7.1 (registering) and §7.2 (signing in) that do not need the store.
struct WebAuthnVerifier: Sendable {
    let rpID: String
    /// The web origin, and any `android:apk-key-hash:` origins of configured apps.
    let origins: Set<String>

    func check(_ client: ClientData, type: String) throws {
        guard client.type == type else { throw WebAuthnRefusal("clientDataJSON.type is \(client.type), not \(type)") }
        guard origins.contains(client.origin) else {
            throw WebAuthnRefusal("the credential was used at \(client.origin), which is not this site (\(origins.sorted().joined(separator: ", ")))")
        }
        guard client.crossOrigin != true else { throw WebAuthnRefusal("the ceremony ran in a frame of another site (crossOrigin)") }
    }

    func check(_ data: AuthenticatorData) throws {
        guard data.rpIDHash == Array(SHA256.hash(data: Array(rpID.utf8))) else {
            throw WebAuthnRefusal("the authenticator signed for another relying party than \(rpID)")
        }
        guard data.userPresent else { throw WebAuthnRefusal("the authenticator did not see the user present (UP flag)") }
        guard data.userVerified else { throw WebAuthnRefusal("the authenticator did not verify the user (UV flag): a passkey needs the device's lock") }
    }

    /// A new credential: its authenticator data, from the attestation object (any attestation is taken as none).
    func registration(clientDataJSON: [UInt8], attestationObject: [UInt8]) throws -> (ClientData, AuthenticatorData, AuthenticatorData.AttestedCredential) {
        let client = try ClientData.read(clientDataJSON)
        try check(client, type: "webauthn.create")
        let object: CBOR
        do { object = try CBOR.decode(attestationObject) } catch { throw WebAuthnRefusal("the attestation object is not CBOR: \(error)") }
        guard let authData = object["authData"]?.byteString else { throw WebAuthnRefusal("the attestation object has no authData") }
        let data = try AuthenticatorData(authData)
        try check(data)
        guard let credential = data.credential else { throw WebAuthnRefusal("the authenticator data holds no credential") }
        _ = try COSEKey(credential.publicKey)
        return (client, data, credential)
    }

    /// A sign-in's signature over the authenticator data and the client data's hash, with the stored key.
    func assertion(clientDataJSON: [UInt8], authenticatorData: [UInt8], signature: [UInt8], publicKey: [UInt8]) throws -> (ClientData, AuthenticatorData) {
        let client = try ClientData.read(clientDataJSON)
        try check(client, type: "webauthn.get")
        let data = try AuthenticatorData(authenticatorData)
        try check(data)
        let signed = authenticatorData + Array(SHA256.hash(data: clientDataJSON))
        guard try COSEKey(publicKey).verifies(signature, for: signed) else { throw WebAuthnRefusal("the signature does not verify with this passkey's key") }
        return (client, data)
    }
}
