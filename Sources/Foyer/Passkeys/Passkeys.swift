import Crypto
import Foundation
import FoyerServer
import Hummingbird
import Logging
import Prometheus

/// Passkeys (WebAuthn Level 3) on Foyer's accounts: the options a browser or app needs to make one or sign in with
/// one, and the checks of what comes back. Challenges live in the store, so an instance behind the load balancer
/// other than the one that gave the options can take the answer; each is good once, for five minutes.
struct Passkeys: Sendable {
    static let challengeLifetime: TimeInterval = 300
    /// Adding a passkey is a change of how one signs in: only right after signing in.
    static let recentSignIn: TimeInterval = 600
    static let maximumNameLength = 100

    let storage: any PasskeyStorage
    let settings: PasskeySettings
    let metrics: PasskeyMetrics
    let logger: Logger

    /// The relying party: `--webauthn-rp-id`, else the public URL's host, else the host the request came to.
    func rpID(for request: Request) -> String {
        if let id = settings.rpID { return id }
        let origin = webOrigin(for: request)
        return URLComponents(string: origin)?.host ?? "localhost"
    }

    func webOrigin(for request: Request) -> String {
        settings.publicURL ?? request.publicOrigin(trustProxy: settings.trustProxy)
    }

    func verifier(for request: Request) -> WebAuthnVerifier {
        WebAuthnVerifier(rpID: rpID(for: request), origins: Set([webOrigin(for: request)] + settings.androidOrigins))
    }

    // MARK: Registering

    func registrationOptions(for user: User, request: Request) async throws -> CreationOptions {
        let userId = try Self.id(of: user)
        let handle = try await storage.userHandle(of: userId, making: Base64URL.randomToken(bytes: 32))
        let challenge = try await newChallenge(.registration, userId: userId)
        return CreationOptions(
            rp: .init(id: rpID(for: request), name: settings.rpName),
            user: .init(id: handle, name: user.email, displayName: user.name),
            challenge: challenge,
            pubKeyCredParams: COSEKey.Algorithm.allCases.map { .init(alg: $0.rawValue) },
            timeout: Int(Self.challengeLifetime * 1000),
            excludeCredentials: try await storage.passkeys(of: userId).map { .init(id: $0.id) },
            authenticatorSelection: .init(),
            attestation: "none"
        )
    }

    /// The new passkey, or WebAuthnRefusal saying what failed.
    func register(_ response: RegistrationResponseJSON, name: String?, for user: User, request: Request) async throws -> Passkey {
        do {
            let userId = try Self.id(of: user)
            let passkey = try await verifiedRegistration(response, name: name, userId: userId, request: request)
            guard try await storage.insert(passkey) else { throw WebAuthnRefusal("this passkey is registered already") }
            metrics.count(.registration, .accepted)
            return passkey
        } catch let refusal as WebAuthnRefusal {
            metrics.count(.registration, .refused)
            logger.notice("passkey registration refused: \(refusal.description)")
            throw refusal
        }
    }

    private func verifiedRegistration(_ response: RegistrationResponseJSON, name: String?, userId: Int64, request: Request) async throws -> Passkey {
        guard response.type == "public-key" else { throw WebAuthnRefusal("type must be public-key") }
        guard let clientDataJSON = Self.bytes(response.response.clientDataJSON), let attestation = Self.bytes(response.response.attestationObject) else {
            throw WebAuthnRefusal("clientDataJSON and attestationObject must be base64url")
        }
        let (client, data, credential) = try verifier(for: request).registration(clientDataJSON: clientDataJSON, attestationObject: attestation)
        try await take(client, .registration, userId: userId)
        let id = Data(credential.id).base64URLEncoded
        guard Self.bytes(response.rawId) == credential.id else { throw WebAuthnRefusal("rawId is not the credential the authenticator made") }
        let named = name?.trimmingCharacters(in: .whitespacesAndNewlines).nonEmpty ?? Self.defaultName(request: request, synced: data.backupEligible)
        guard named.count <= Self.maximumNameLength else { throw WebAuthnRefusal("a passkey's name is at most \(Self.maximumNameLength) characters") }
        return Passkey(
            id: id, userId: userId, name: named, publicKey: Data(credential.publicKey).base64URLEncoded, signCount: Int64(data.signCount),
            backupEligible: data.backupEligible, backedUp: data.backedUp, createdAt: Date(), lastUsedAt: nil
        )
    }

    // MARK: Signing in

    func authenticationOptions(request: Request) async throws -> RequestOptions {
        RequestOptions(challenge: try await newChallenge(.authentication, userId: nil), timeout: Int(Self.challengeLifetime * 1000), rpId: rpID(for: request))
    }

    /// The account the assertion signs in, or WebAuthnRefusal. Nothing is changed by a refused one.
    func authenticate(_ response: AuthenticationResponseJSON, request: Request) async throws -> Int64 {
        do {
            let userId = try await verifiedAssertion(response, request: request)
            metrics.count(.authentication, .accepted)
            return userId
        } catch let refusal as WebAuthnRefusal {
            metrics.count(.authentication, refusal.counterDidNotRise ? .counter : .refused)
            logger.notice("passkey sign-in refused: \(refusal.description)")
            throw refusal
        }
    }

    private func verifiedAssertion(_ response: AuthenticationResponseJSON, request: Request) async throws -> Int64 {
        guard response.type == "public-key" else { throw WebAuthnRefusal("type must be public-key") }
        guard let clientDataJSON = Self.bytes(response.response.clientDataJSON), let authenticatorData = Self.bytes(response.response.authenticatorData),
            let signature = Self.bytes(response.response.signature), let rawId = Self.bytes(response.rawId)
        else { throw WebAuthnRefusal("clientDataJSON, authenticatorData, signature and rawId must be base64url") }
        guard let passkey = try await storage.passkey(id: Data(rawId).base64URLEncoded), let publicKey = Self.bytes(passkey.publicKey) else {
            throw WebAuthnRefusal("this passkey is not registered here (it may have been removed from the account)")
        }
        let (client, data) = try verifier(for: request).assertion(
            clientDataJSON: clientDataJSON, authenticatorData: authenticatorData, signature: signature, publicKey: publicKey
        )
        try await take(client, .authentication, userId: nil)
        if let handle = response.response.userHandle?.nonEmpty {
            guard try await storage.user(withHandle: handle) == passkey.userId else { throw WebAuthnRefusal("the user handle is not this passkey's account") }
        }
        let counter = Int64(data.signCount)
        if counter != 0 || passkey.signCount != 0 {
            // A copy of the authenticator (a cloned key) signs with a counter the original already passed.
            guard counter > passkey.signCount else {
                throw WebAuthnRefusal(
                    "the passkey's signature counter did not rise (\(counter) after \(passkey.signCount)): it may have been copied, and is refused",
                    counterDidNotRise: true
                )
            }
        }
        guard try await storage.used(passkey.id, signCount: counter, previous: passkey.signCount, backedUp: data.backedUp, at: Date()) else {
            throw WebAuthnRefusal("the passkey's signature counter did not rise: another sign-in with it came first", counterDidNotRise: true)
        }
        return passkey.userId
    }

    // MARK: Challenges

    private func newChallenge(_ ceremony: PasskeyChallenge.Ceremony, userId: Int64?) async throws -> String {
        let challenge = Base64URL.randomToken(bytes: 32)
        try await storage.keepChallenge(challenge, PasskeyChallenge(ceremony: ceremony, userId: userId, expiresAt: Date().addingTimeInterval(Self.challengeLifetime)))
        return challenge
    }

    /// The challenge the client signed, once, unexpired, of this ceremony (and account).
    private func take(_ client: ClientData, _ ceremony: PasskeyChallenge.Ceremony, userId: Int64?) async throws {
        guard let bytes = client.challengeBytes, bytes.count >= 16 else { throw WebAuthnRefusal("the challenge is not one Foyer gave") }
        guard let kept = try await storage.takeChallenge(Data(bytes).base64URLEncoded) else {
            throw WebAuthnRefusal("the challenge is unknown or was used already: ask for new options")
        }
        guard kept.expiresAt > Date() else { throw WebAuthnRefusal("the challenge expired (they last 5 minutes): ask for new options") }
        guard kept.ceremony == ceremony, kept.userId == userId else { throw WebAuthnRefusal("the challenge was given for another ceremony") }
    }

    // MARK: The account's passkeys

    func list(of user: User) async throws -> [Passkey] { try await storage.passkeys(of: try Self.id(of: user)) }

    func rename(_ id: String, of user: User, to name: String) async throws -> Bool {
        try await storage.rename(id, of: try Self.id(of: user), to: name)
    }

    func delete(_ id: String, of user: User) async throws -> Bool { try await storage.delete(id, of: try Self.id(of: user)) }

    /// Whether `identity` signed in recently enough to add a passkey: else a 403 asking to sign in again.
    static func requireRecentSignIn(_ identity: Identity, now: Date = Date()) throws {
        guard let session = identity.session, now.timeIntervalSince(session.createdAt) <= recentSignIn else {
            throw AppError(.forbidden, title: Phrase("passkeys.errors.sign_in_again.title"), message: Phrase("passkeys.errors.sign_in_again"))
        }
    }

    static func defaultName(request: Request, synced: Bool) -> String {
        let device = DeviceName.describe(request.headers.value(.userAgent))
        return synced ? "Passkey (synced), made on \(device)" : "Passkey on \(device)"
    }

    private static func id(of user: User) throws -> Int64 {
        guard let id = user.id else { throw AppError(.internalServerError, message: "An account without an id") }
        return id
    }

    static func bytes(_ text: String) -> [UInt8]? { Data(base64URLEncoded: text).map(Array.init) }
}

/// `foyer_passkey_ceremonies_total{ceremony, outcome}`.
struct PasskeyMetrics: Sendable {
    enum Outcome: String, CaseIterable, Sendable {
        case accepted, refused
        /// A signature counter that did not rise: a cloned authenticator, or a replay.
        case counter
    }

    private let counters: [String: Counter]

    init(registry: PrometheusCollectorRegistry) {
        var counters: [String: Counter] = [:]
        for ceremony in [PasskeyChallenge.Ceremony.registration, .authentication] {
            for outcome in Outcome.allCases {
                counters["\(ceremony.rawValue) \(outcome.rawValue)"] = registry.makeCounter(
                    descriptor: MetricNameDescriptor(
                        namespace: "foyer", metricName: "passkey_ceremonies", unitName: "total",
                        helpText: "Passkey registrations and sign-ins, by outcome (counter: a signature counter that did not rise)"
                    ),
                    labels: [("ceremony", ceremony.rawValue), ("outcome", outcome.rawValue)]
                )
            }
        }
        self.counters = counters
    }

    func count(_ ceremony: PasskeyChallenge.Ceremony, _ outcome: Outcome) {
        counters["\(ceremony.rawValue) \(outcome.rawValue)"]?.increment()
    }
}
