/// Signing in with OpenID Connect providers, when configured: Keycloak and any provider by discovery. Each gets
/// browser sign-in (code + PKCE) and back-channel logout under `/sign_in/{name}`; tokens are held server-side and
/// refreshed; apps' Bearer access tokens and ID tokens are checked against the provider's keys. Keycloak adds the
/// `/auth` proxy for native SDKs.
struct ProvidersFeature {
    let keycloakSettings: KeycloakSettings?
    let providers: IdentityProviders

    init(_ app: Foundations, keycloak: KeycloakSettings?, settings: [ProviderSettings], sessions: SessionRepository) {
        keycloakSettings = keycloak
        var all: [ProviderSessions] = []
        if !settings.isEmpty {
            let http = ProviderClient.makeHTTPClient()
            app.closeOnShutdown { try await http.shutdown() }
            for provider in settings {
                app.logger.info(
                    "Signing in with \(provider.displayName)",
                    metadata: ["provider": .string(provider.name), "discovery": .string(provider.discoveryURL), "client": .string(provider.clientID)]
                )
                all.append(ProviderSessions(
                    client: ProviderClient(settings: provider, http: http, metrics: app.metrics), store: app.store, sessions: sessions,
                    trustProxy: app.config.trustProxy, linkVerifiedEmail: app.config.oidcLinkVerifiedEmail, logger: app.logger
                ))
            }
        }
        providers = IdentityProviders(all)
    }

    /// Keycloak's, when it is configured: it holds every password, and the `/auth` proxy and the task feed's client
    /// credentials are its extras.
    var keycloak: ProviderSessions? { providers.passwordChecker }

    /// The caller's roles, from their provider's roles claim; nil (no check by role) for local accounts.
    var roles: RealmRoleSource {
        { [providers] identity in try await providers.roles(of: identity) }
    }

    /// Before authentication: the realm's own pages and endpoints, under `/auth`, for apps that talk to it directly.
    func proxyMiddleware(trustProxy: Bool) throws -> KeycloakProxyMiddleware? {
        guard let keycloakSettings, let keycloak else { return nil }
        return try KeycloakProxyMiddleware(settings: keycloakSettings, http: keycloak.client.http, trustProxy: trustProxy)
    }

    func addRoutes(to router: FoyerRouter, signIn: SignIn, views: Views) {
        for provider in providers.all {
            BrowserSignInController(provider: provider, signIn: signIn, views: views).addRoutes(to: router)
            BackChannelLogoutController(provider: provider).addRoutes(to: router)
        }
    }
}
