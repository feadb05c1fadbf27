/// Signing in with Keycloak, when configured: browser sign-in (code + PKCE), tokens held server-side and
/// refreshed, Bearer access tokens from apps, back-channel logout, and the `/auth` proxy for native SDKs.
struct KeycloakFeature {
    let settings: KeycloakSettings?
    /// Nil when Foyer signs people in with local accounts.
    let sessions: KeycloakSessions?

    init(_ app: Foundations, settings: KeycloakSettings?, sessions: SessionRepository) {
        self.settings = settings
        self.sessions = settings.map { settings in
            let http = KeycloakClient.makeHTTPClient()
            app.closeOnShutdown { try await http.shutdown() }
            app.logger.info("Signing in with Keycloak", metadata: ["realm": .string(settings.realmURL), "client": .string(settings.clientID)])
            return KeycloakSessions(
                client: KeycloakClient(settings: settings, http: http, metrics: app.metrics), store: app.store, sessions: sessions,
                trustProxy: app.config.trustProxy, logger: app.logger
            )
        }
    }

    /// The caller's realm roles. Only Keycloak users have them; local accounts are not restricted by role (nil).
    var roles: RealmRoleSource {
        { [sessions] identity in try await sessions?.realmRoles(of: identity) }
    }

    /// Before authentication: the realm's own pages and endpoints, under `/auth`, for apps that talk to it directly.
    func addMiddleware(to router: FoyerRouter, trustProxy: Bool) throws {
        guard let sessions else { return }
        router.add(middleware: try KeycloakProxyMiddleware(settings: sessions.client.settings, http: sessions.client.http, trustProxy: trustProxy))
    }

    func addRoutes(to router: FoyerRouter, signIn: SignIn, views: Views) {
        guard let sessions else { return }
        KeycloakBrowserSignInController(keycloak: sessions, signIn: signIn, views: views).addRoutes(to: router)
        BackChannelLogoutController(keycloak: sessions).addRoutes(to: router)
    }
}
