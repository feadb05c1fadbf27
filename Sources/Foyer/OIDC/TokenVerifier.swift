import Foundation
import JWTKit

/// A provider's token whose signature, issuer, lifetime and audience checked out (or, for an opaque access
/// token, that the provider's introspection called active for us).
struct VerifiedToken: Sendable {
    /// The provider's name (`ProviderSettings.name`).
    let provider: String
    let raw: String
    let subject: String
    let expiresAt: Date
    private let payload: Data

    init(provider: String, raw: String, subject: String, expiresAt: Date, payload: Data) {
        self.provider = provider
        self.raw = raw
        self.subject = subject
        self.expiresAt = expiresAt
        self.payload = payload
    }

    /// Every claim, for provisioning the user, their roles, and showing them who they are.
    var claims: [String: Any] {
        (try? JSONSerialization.jsonObject(with: payload)) as? [String: Any] ?? [:]
    }
}

/// Why a token was not accepted: said to the caller in the 401, so an app developer can fix it.
struct TokenRejected: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Checks JWTs a provider signed against its published keys (JWKS). Keys are fetched on first use and kept;
/// a token naming a key we do not know makes us fetch them again (the provider rotated), at most once per
/// `refetchInterval`, so a stream of forged `kid`s cannot turn into a stream of requests to the provider.
actor TokenVerifier {
    enum Use {
        /// An access token an app presents as `Authorization: Bearer`.
        case accessToken(audiences: Set<String>)
        /// The ID token of our own code flow: it must be for our client and carry the nonce we sent.
        case idToken(clientID: String, nonce: String)
        /// The ID token a native app got from the provider and hands us to sign in: for one of the app clients, and
        /// carrying the nonce the app sent (as it is, or SHA-256 hex as Sign in with Apple puts it) when it has one.
        case appIDToken(clientIDs: Set<String>, nonce: String?)
        /// A Back-Channel Logout 1.0 logout token the provider posts to us: for our client, the logout event, a `sid`
        /// or `sub`, recently issued, and no `nonce` (so an ID token cannot pass for one).
        case logoutToken(clientID: String)
    }

    static let backChannelLogoutEvent = "http://schemas.openid.net/event/backchannel-logout"
    /// A logout token is sent the moment the session ends; an old one is a replay.
    static let logoutTokenMaximumAge: TimeInterval = 300

    /// Asymmetric algorithms only: `none` and HMAC (`HS256` with the public key as secret) are how JWTs get forged.
    static let acceptedAlgorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
    static let refetchInterval: TimeInterval = 10
    /// Clocks differ a little between the provider and us.
    static let leeway: TimeInterval = 10

    private let client: ProviderClient
    private var keys = JWTKeyCollection()
    private var keyIDs: Set<String> = []
    private var fetchedAt: Date?
    private var fetching: Task<(JWTKeyCollection, Set<String>), any Error>?

    init(client: ProviderClient) {
        self.client = client
    }

    /// The token's claims when the provider signed it for us and it is still good; TokenRejected otherwise.
    /// Throws ProviderError when the keys cannot be fetched: that is not the caller's fault.
    func verify(_ token: String, issuers: Set<String>, use: Use) async throws -> VerifiedToken {
        let word = client.settings.word
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Data(base64URLEncoded: parts[0]),
            let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any]
        else { throw TokenRejected("The token is not a JWT") }
        let algorithm = header["alg"] as? String ?? "none"
        guard Self.acceptedAlgorithms.contains(algorithm) else {
            throw TokenRejected("The token is signed with \(algorithm); only the \(word)'s asymmetric keys are accepted")
        }
        guard let keyID = header["kid"] as? String else { throw TokenRejected("The token names no signing key (kid)") }
        if !keyIDs.contains(keyID), fetchedAt.map({ Date().timeIntervalSince($0) > Self.refetchInterval }) ?? true {
            try await refetchKeys()
        }
        guard keyIDs.contains(keyID) else { throw TokenRejected("The token is signed with a key the \(word) does not publish") }

        let checked: CheckedClaims
        do {
            checked = try await keys.verify(token, as: CheckedClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw TokenRejected("The token's signature does not verify with the \(word)'s keys")
        } catch {
            throw TokenRejected("The token could not be verified: \(error)")
        }
        let now = Date()
        if case .logoutToken = use {
            if let exp = checked.exp, exp.value.addingTimeInterval(Self.leeway) <= now { throw TokenRejected("The token has expired") }
        } else {
            guard let exp = checked.exp, exp.value.addingTimeInterval(Self.leeway) > now else { throw TokenRejected("The token has expired") }
            guard checked.sub?.value.isEmpty == false else { throw TokenRejected("The token names no subject (sub)") }
        }
        guard issuers.contains(checked.iss.value) else {
            throw TokenRejected("The token was issued by \(checked.iss.value), not by this \(word)")
        }
        let audiences = checked.aud?.value ?? []
        switch use {
        case .accessToken(let accepted):
            // Keycloak names the app in `azp` and often only "account" in `aud`.
            guard !accepted.isDisjoint(with: audiences) || checked.azp.map(accepted.contains) == true else {
                throw TokenRejected("The token is meant for \((audiences + [checked.azp].compactMap { $0 }).joined(separator: ", ")), not for Foyer")
            }
            // Keycloak says what a token is in `typ` (Bearer, ID, Refresh); other providers in `token_use`.
            if let type = checked.typ, type.lowercased() != "bearer" {
                throw TokenRejected("A \(type) token is not an access token")
            }
            if let use = checked.tokenUse, use != "access" {
                throw TokenRejected("An \(use) token is not an access token")
            }
        case .idToken(let clientID, let nonce):
            guard audiences.contains(clientID), audiences.count == 1 || checked.azp == clientID else {
                throw TokenRejected("The ID token is not meant for client \(clientID)")
            }
            guard checked.nonce == nonce else { throw TokenRejected("The ID token does not carry the nonce of this sign-in") }
        case .appIDToken(let clientIDs, let nonce):
            guard !clientIDs.isDisjoint(with: audiences), audiences.count == 1 || checked.azp.map(clientIDs.contains) == true else {
                throw TokenRejected("The ID token is meant for \(audiences.joined(separator: ", ")), not for an app Foyer accepts (\(clientIDs.sorted().joined(separator: ", ")))")
            }
            // Keycloak says `typ: ID`; an access token must not pass for an ID token.
            if let type = checked.typ, type.lowercased() != "id" { throw TokenRejected("A \(type) token is not an ID token") }
            if let use = checked.tokenUse, use != "id" { throw TokenRejected("An \(use) token is not an ID token") }
            if let iat = checked.iat?.value, iat.timeIntervalSince(now) > Self.leeway {
                throw TokenRejected("The ID token was issued at \(iat), in the future")
            }
            if checked.nonce != nil || nonce != nil {
                guard let expected = checked.nonce, let nonce, expected == nonce || expected == nonce.sha256Hex else {
                    throw TokenRejected("The ID token's nonce does not match the nonce sent with it")
                }
            }
        case .logoutToken(let clientID):
            guard audiences.contains(clientID) else { throw TokenRejected("The logout token is not meant for client \(clientID)") }
            guard checked.nonce == nil else { throw TokenRejected("A logout token must not carry a nonce") }
            guard let iat = checked.iat?.value else { throw TokenRejected("The logout token has no iat") }
            guard iat.timeIntervalSince(now) < Self.leeway, now.timeIntervalSince(iat) < Self.logoutTokenMaximumAge else {
                throw TokenRejected("The logout token was issued at \(iat), too far from now")
            }
            guard checked.events?[Self.backChannelLogoutEvent] != nil else {
                throw TokenRejected("The logout token's events claim has no \(Self.backChannelLogoutEvent)")
            }
            guard checked.sid?.isEmpty == false || checked.sub?.value.isEmpty == false else {
                throw TokenRejected("The logout token names neither a session (sid) nor a subject (sub)")
            }
        }
        return VerifiedToken(
            provider: client.settings.name, raw: token, subject: checked.sub?.value ?? "", expiresAt: checked.exp?.value ?? now,
            payload: Data(base64URLEncoded: parts[1]) ?? Data()
        )
    }

    /// One fetch at a time; every caller waiting meanwhile shares its result.
    private func refetchKeys() async throws {
        if let fetching {
            (keys, keyIDs) = try await fetching.value
            return
        }
        let client = self.client
        let fetch = Task { () async throws -> (JWTKeyCollection, Set<String>) in
            let body = try await client.jwks()
            guard let jwks = try? JSONDecoder().decode(JWKS.self, from: body) else {
                throw client.failure("its JWKS (jwks_uri) is not a JSON Web Key Set")
            }
            let keys = JWTKeyCollection()
            var ids: Set<String> = []
            // A key the provider publishes for encryption, or in a type we cannot use, is not a reason to reject the rest.
            for jwk in jwks.keys where jwk.keyIdentifier != nil {
                if (try? await keys.add(jwk: jwk)) != nil, let id = jwk.keyIdentifier?.string { ids.insert(id) }
            }
            return (keys, ids)
        }
        fetching = fetch
        defer { fetching = nil }
        (keys, keyIDs) = try await fetch.value
        fetchedAt = Date()
    }
}

/// The claims the verifier checks; everything else is read from the payload as it is.
private struct CheckedClaims: JWTPayload {
    let iss: IssuerClaim
    let sub: SubjectClaim?
    let exp: ExpirationClaim?
    let iat: IssuedAtClaim?
    let aud: AudienceClaim?
    let azp: String?
    let typ: String?
    let nonce: String?
    let tokenUse: String?
    let sid: String?
    /// Only the keys matter (each event's value is an object, usually empty).
    let events: [String: EventValue]?

    struct EventValue: Codable {}

    enum CodingKeys: String, CodingKey {
        case iss, sub, exp, iat, aud, azp, typ, nonce, sid, events, tokenUse = "token_use"
    }

    /// The checks that need to know what the token is for happen in the verifier.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
