import Foundation
import Hummingbird

/// Every OpenID Connect provider configured (Keycloak among them, when it is): which one a token, a session or a
/// sign-in belongs to. Empty when Foyer signs people in with local accounts only.
struct IdentityProviders: Sendable {
    let all: [ProviderSessions]
    let storage: (any ProviderStorage)?

    init(_ all: [ProviderSessions]) {
        self.all = all
        storage = all.first?.storage
    }

    var isEmpty: Bool { all.isEmpty }

    /// Keycloak holds every password when it is configured: the password form and `POST /api/v1/sessions` go to it.
    var passwordChecker: ProviderSessions? { all.first { $0.settings.checksEveryPassword } }

    func named(_ name: String) -> ProviderSessions? {
        all.first { $0.name == name }
    }

    /// The provider a JWT access token names as issuer (read unverified, only to choose whose keys check it); with one
    /// provider, that one, so a wrong issuer is refused with its reason rather than as unknown.
    func identity(forAccessToken token: String, request: Request) async throws -> Identity {
        let issuer = UnverifiedJWT.payload(token)?["iss"] as? String
        var chosen = all.count == 1 ? all.first : nil
        if chosen == nil, let issuer {
            for provider in all where try await provider.acceptedIssuers(for: request).contains(issuer) {
                chosen = provider
                break
            }
        }
        guard let chosen else {
            throw AuthenticationRequired(invalidToken: "The token was issued by \(issuer ?? "nobody named"), not by a provider Foyer signs in with")
        }
        return try await chosen.identity(forAccessToken: token, request: request)
    }

    /// An opaque Bearer token that is no Foyer session: the first provider whose introspection calls it active for us.
    /// A provider that cannot be asked just now is passed over (logged): the caller hears 401, not 503.
    func identity(forOpaqueAccessToken token: String) async throws -> Identity? {
        for provider in all {
            do {
                if let identity = try await provider.identity(forOpaqueAccessToken: token) { return identity }
            } catch let error as ProviderError {
                provider.logger.warning("introspection failed", metadata: ["provider": .string(provider.name), "error": .string("\(error)")])
            }
        }
        return nil
    }

    /// The provider a Foyer session signed in with, and the tokens it keeps; nil for a local sign-in.
    func ofSession(_ sessionID: String) async throws -> (provider: ProviderSessions, tokens: ProviderTokenRecord)? {
        guard let storage, let tokens = try await storage.tokens(ofSession: sessionID), let provider = named(tokens.provider) else { return nil }
        return (provider, tokens)
    }

    /// Which provider the caller signed in with: the one of the token they presented, or of their session.
    func provider(of identity: Identity) async throws -> ProviderSessions? {
        if let token = identity.providerToken { return named(token.provider) }
        guard let session = identity.session else { return nil }
        return try await ofSession(session.id)?.provider
    }

    /// The caller's roles from their provider's roles claim: in the token they presented, or in their session's
    /// tokens (which came to us straight from the token endpoint). Nil when roles do not restrict them (local
    /// accounts, providers without a roles claim).
    func roles(of identity: Identity) async throws -> Set<String>? {
        if let token = identity.providerToken { return named(token.provider)?.settings.roles(in: token.claims) }
        guard let session = identity.session, let (provider, tokens) = try await ofSession(session.id) else { return nil }
        guard provider.settings.rolesClaims != nil else { return nil }
        return [tokens.accessToken, tokens.idToken ?? ""].compactMap(UnverifiedJWT.payload).reduce(into: []) { roles, claims in
            roles.formUnion(provider.settings.roles(in: claims) ?? [])
        }
    }

    /// What the provider says about the caller: the claims of the token they presented, else of their session's ID
    /// token (or access token); nil for someone who did not sign in with a provider.
    func claims(of identity: Identity) async throws -> (provider: ProviderSettings, claims: [String: Any])? {
        if let token = identity.providerToken, let provider = named(token.provider) { return (provider.settings, token.claims) }
        guard let session = identity.session, let (provider, tokens) = try await ofSession(session.id),
            let claims = UnverifiedJWT.payload(tokens.idToken ?? tokens.accessToken)
        else { return nil }
        return (provider.settings, claims)
    }

    /// The provider access token to relay upstream for the caller: the one they presented, or their session's
    /// (refreshed when near expiry); nil for a local session or a native ID-token sign-in.
    func accessToken(for identity: Identity) async throws -> String? {
        if let presented = identity.providerToken { return presented.raw }
        guard let session = identity.session, let (provider, tokens) = try await ofSession(session.id) else { return nil }
        return try await provider.accessToken(for: identity, stored: tokens)
    }

    /// Ends the provider's side of a Foyer session being revoked, and drops its tokens.
    func logout(session sessionID: String) async throws {
        guard let (provider, tokens) = try await ofSession(sessionID) else { return }
        try await provider.logout(session: sessionID, stored: tokens)
    }
}
