import FoyerServer
/// Which realm and client Foyer signs users in with: from flags or env, else from mobile-services.json.
/// The client secret comes from the environment only, so it never sits in a file apps download.
struct KeycloakSettings: Sendable, Equatable {
    /// Without a trailing slash; ends in `/auth` on old servers, not on new ones. Discovery sorts out the rest.
    let baseURL: String
    let realm: String
    let clientID: String
    let clientSecret: String?
    /// Whom an app's Bearer token must be for (`aud`, or the app as `azp`): Foyer's client unless configured.
    let audiences: Set<String>
    /// Signing a browser out continues at the realm's end_session_endpoint (RP-initiated logout), so the realm's own
    /// browser session ends too and the next "Sign in with Keycloak" asks for a password again.
    let frontChannelLogout: Bool
    /// Where Keycloak sends the browser after that; nil: Foyer's public origin + `/`. Must be registered at the
    /// client as a valid post-logout redirect URI.
    let postLogoutRedirectURI: String?
    /// Native apps whose ID tokens (from AppAuth against the realm) `POST /api/v1/sessions` accepts.
    let appClientIDs: Set<String>

    init?(config: FoyerConfig, mobileServices: MobileServices?) throws {
        let fromFile = mobileServices?.keycloak
        guard let base = config.keycloakURL ?? fromFile?.authServerURL else { return nil }
        guard let realm = config.keycloakRealm ?? fromFile?.realm, !realm.isEmpty else {
            throw StartupError("Keycloak: \(base) is configured without a realm (--keycloak-realm or FOYER_KEYCLOAK_REALM)")
        }
        guard let clientID = config.keycloakClientID ?? fromFile?.clientID, !clientID.isEmpty else {
            throw StartupError("Keycloak: \(base) is configured without a client id (--keycloak-client-id or FOYER_KEYCLOAK_CLIENT_ID)")
        }
        guard base.hasPrefix("http://") || base.hasPrefix("https://") else {
            throw StartupError("Keycloak: the base URL must start with http:// or https://, got \(base)")
        }
        baseURL = base.hasSuffix("/") ? String(base.dropLast()) : base
        self.realm = realm
        self.clientID = clientID
        clientSecret = config.keycloakClientSecret.flatMap { $0.isEmpty ? nil : $0 }
        let configured = ProviderSettings.commaSeparated(config.keycloakAudience)
        audiences = configured.isEmpty ? [clientID] : configured
        frontChannelLogout = config.keycloakFrontChannelLogout
        postLogoutRedirectURI = config.keycloakPostLogoutRedirectURI
        appClientIDs = ProviderSettings.commaSeparated(config.keycloakAppClientIDs)
    }

    var realmURL: String { "\(baseURL)/realms/\(realm)" }
    var discoveryURL: String { realmURL + "/.well-known/openid-configuration" }

    /// Keycloak as one provider among others: its realm's discovery, realm roles, its logout by refresh token and
    /// the issuer its proxy shows apps.
    var provider: ProviderSettings {
        ProviderSettings(
            name: "keycloak", displayName: "Keycloak", discoveryURL: discoveryURL, expectedIssuer: nil, clientID: clientID,
            clientSecret: clientSecret, scopes: "openid email profile", audiences: audiences, appClientIDs: appClientIDs,
            rolesClaims: ["realm_access.roles", "roles"], frontChannelLogout: frontChannelLogout, postLogoutRedirectURI: postLogoutRedirectURI,
            word: "realm", endsSessionsByLogoutPost: true, issuerThroughProxy: true, checksEveryPassword: true, placeholderEmailDomain: "\(realm).keycloak.invalid"
        )
    }
}
