import Foundation
import JWTKit

/// A Keycloak token whose signature, issuer, lifetime and audience checked out.
struct VerifiedKeycloakToken: Sendable {
    let raw: String
    let subject: String
    let expiresAt: Date
    /// Keycloak's `realm_access.roles` (or a top-level `roles`, as some providers write them).
    let realmRoles: Set<String>
    private let payload: Data

    init(raw: String, subject: String, expiresAt: Date, payload: Data) {
        self.raw = raw
        self.subject = subject
        self.expiresAt = expiresAt
        self.payload = payload
        realmRoles = Self.realmRoles(in: (try? JSONSerialization.jsonObject(with: payload)) as? [String: Any] ?? [:])
    }

    /// Every claim, for provisioning the user and for showing them who they are.
    var claims: [String: Any] {
        (try? JSONSerialization.jsonObject(with: payload)) as? [String: Any] ?? [:]
    }

    static func realmRoles(in claims: [String: Any]) -> Set<String> {
        let nested = (claims["realm_access"] as? [String: Any])?["roles"] as? [String] ?? []
        let topLevel = claims["roles"] as? [String] ?? []
        return Set(nested + topLevel)
    }
}

/// Why a token was not accepted: said to the caller in the 401, so an app developer can fix it.
struct TokenRejected: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Checks Keycloak-signed JWTs against the realm's published keys (JWKS). Keys are fetched on first use and kept;
/// a token naming a key we do not know makes us fetch them again (Keycloak rotated), at most once per
/// `refetchInterval`, so a stream of forged `kid`s cannot turn into a stream of requests to Keycloak.
actor KeycloakTokenVerifier {
    enum Use {
        /// An access token an app presents as `Authorization: Bearer`.
        case accessToken(audiences: Set<String>)
        /// The ID token of our own code flow: it must be for our client and carry the nonce we sent.
        case idToken(clientID: String, nonce: String)
        /// A Back-Channel Logout 1.0 logout token Keycloak posts to us: for our client, the logout event, a `sid`
        /// or `sub`, recently issued, and no `nonce` (so an ID token cannot pass for one).
        case logoutToken(clientID: String)
    }

    static let backChannelLogoutEvent = "http://schemas.openid.net/event/backchannel-logout"
    /// A logout token is sent the moment the session ends; an old one is a replay.
    static let logoutTokenMaximumAge: TimeInterval = 300

    /// Asymmetric algorithms only: `none` and HMAC (`HS256` with the public key as secret) are how JWTs get forged.
    static let acceptedAlgorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
    static let refetchInterval: TimeInterval = 10
    /// Clocks differ a little between Keycloak and us.
    static let leeway: TimeInterval = 10

    private let client: KeycloakClient
    private var keys = JWTKeyCollection()
    private var keyIDs: Set<String> = []
    private var fetchedAt: Date?
    private var fetching: Task<(JWTKeyCollection, Set<String>), any Error>?

    init(client: KeycloakClient) {
        self.client = client
    }

    /// The token's claims when Keycloak signed it for us and it is still good; TokenRejected otherwise.
    /// Throws KeycloakError when the keys cannot be fetched: that is not the caller's fault.
    func verify(_ token: String, issuers: Set<String>, use: Use) async throws -> VerifiedKeycloakToken {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Data(base64URLEncoded: parts[0]),
            let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any]
        else { throw TokenRejected("The token is not a JWT") }
        let algorithm = header["alg"] as? String ?? "none"
        guard Self.acceptedAlgorithms.contains(algorithm) else {
            throw TokenRejected("The token is signed with \(algorithm); only the realm's asymmetric keys are accepted")
        }
        guard let keyID = header["kid"] as? String else { throw TokenRejected("The token names no signing key (kid)") }
        if !keyIDs.contains(keyID), fetchedAt.map({ Date().timeIntervalSince($0) > Self.refetchInterval }) ?? true {
            try await refetchKeys()
        }
        guard keyIDs.contains(keyID) else { throw TokenRejected("The token is signed with a key the realm does not publish") }

        let checked: CheckedClaims
        do {
            checked = try await keys.verify(token, as: CheckedClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw TokenRejected("The token's signature does not verify with the realm's keys")
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
            throw TokenRejected("The token was issued by \(checked.iss.value), not by this realm")
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
        return VerifiedKeycloakToken(
            raw: token, subject: checked.sub?.value ?? "", expiresAt: checked.exp?.value ?? now,
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
                throw KeycloakError.unavailable("its JWKS (jwks_uri) is not a JSON Web Key Set")
            }
            let keys = JWTKeyCollection()
            var ids: Set<String> = []
            // A key Keycloak publishes for encryption, or in a type we cannot use, is not a reason to reject the rest.
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
