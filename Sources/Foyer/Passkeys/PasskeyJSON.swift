import Foundation

/// `PublicKeyCredentialCreationOptionsJSON`: what `PublicKeyCredential.parseCreationOptionsFromJSON` takes (and
/// what Android's Credential Manager and iOS's ASAuthorization requests are made from). Its members keep WebAuthn's
/// own names (`pubKeyCredParams`), so it is sent without the API's snake_case conversion.
struct CreationOptions: SnakeCaseKeyed, Sendable {
    struct RelyingParty: Encodable, Sendable {
        let id: String
        let name: String
    }

    struct UserEntity: Encodable, Sendable {
        /// The opaque user handle, base64url: never the address.
        let id: String
        let name: String
        let displayName: String
    }

    struct Parameter: Encodable, Sendable {
        var type = "public-key"
        let alg: Int
    }

    struct Descriptor: Encodable, Sendable {
        var type = "public-key"
        let id: String
    }

    struct Selection: Encodable, Sendable {
        var residentKey = "required"
        var requireResidentKey = true
        var userVerification = "required"
    }

    let rp: RelyingParty
    let user: UserEntity
    let challenge: String
    let pubKeyCredParams: [Parameter]
    let timeout: Int
    let excludeCredentials: [Descriptor]
    let authenticatorSelection: Selection
    let attestation: String
}

/// `PublicKeyCredentialRequestOptionsJSON`: no address asked, so no `allowCredentials` (the passkey says whose it is).
struct RequestOptions: SnakeCaseKeyed, Sendable {
    let challenge: String
    let timeout: Int
    let rpId: String
    var allowCredentials: [CreationOptions.Descriptor] = []
    var userVerification = "required"
}

/// A new credential as the browser's `PublicKeyCredential.toJSON()` gives it (members it adds beyond these are ignored).
struct RegistrationResponseJSON: Decodable, Sendable {
    struct Response: Decodable, Sendable {
        let clientDataJSON: String
        let attestationObject: String
    }

    let id: String
    let rawId: String
    let type: String
    let response: Response
}

/// A sign-in's assertion as `PublicKeyCredential.toJSON()` gives it.
struct AuthenticationResponseJSON: Decodable, Sendable {
    struct Response: Decodable, Sendable {
        let clientDataJSON: String
        let authenticatorData: String
        let signature: String
        let userHandle: String?
    }

    let id: String
    let rawId: String
    let type: String
    let response: Response
}

/// A passkey as `GET /api/v1/passkeys` lists it.
struct PasskeyJSON: Encodable, Sendable {
    let id: String
    let name: String
    let createdAt: Date
    let lastUsedAt: Date?
    /// Backed up to a synced store (iCloud Keychain, Google Password Manager): usable on the person's other devices.
    let synced: Bool

    init(_ passkey: Passkey) {
        (id, name, createdAt, lastUsedAt, synced) = (passkey.id, passkey.name, passkey.createdAt, passkey.lastUsedAt, passkey.backedUp)
    }

    enum CodingKeys: String, CodingKey { case id, name, createdAt, lastUsedAt, synced }

    /// `lastUsedAt` is `null` until first used, not missing.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(name, forKey: .name)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(lastUsedAt, forKey: .lastUsedAt)
        try container.encode(synced, forKey: .synced)
    }
}
