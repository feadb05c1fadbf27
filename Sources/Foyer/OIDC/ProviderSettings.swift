import Foundation
import FoyerServer

/// One OpenID Connect provider Foyer signs people in with: any provider by its issuer's discovery document, or
/// Keycloak (`KeycloakSettings`), which is a provider with extras of its own.
struct ProviderSettings: Sendable, Equatable {
    /// Names the provider in URLs (`/sign_in/{name}`), in native sign-ins (`{"provider": name}`), in the database
    /// and in `GET /api/v1/me`: lowercase letters, digits and dashes.
    let name: String
    /// What people read: "Sign in with {displayName}", and in messages ("Keycloak cannot be reached").
    let displayName: String
    let discoveryURL: String
    /// The issuer the discovery document must name, exactly (OpenID Connect Discovery §4.3); nil for Keycloak,
    /// whose issuer follows the address it was reached by (its `/auth` base, its proxy).
    let expectedIssuer: String?
    let clientID: String
    let clientSecret: String?
    let scopes: String
    /// Whom an app's Bearer access token must be for (`aud`, or the app as `azp`): Foyer's client unless configured.
    let audiences: Set<String>
    /// The native apps whose ID tokens `POST /api/v1/sessions` accepts (`aud`).
    let appClientIDs: Set<String>
    /// Where a user's roles are (dotted paths, every one read); nil: this provider's users are not restricted by role.
    let rolesClaims: [String]?
    /// Signing a browser out continues at the provider's end_session_endpoint (RP-initiated logout).
    let frontChannelLogout: Bool
    /// Where the provider sends the browser after that; nil: Foyer's public origin + `/`.
    let postLogoutRedirectURI: String?
    /// How messages name the provider's side: "realm" for Keycloak, "provider" for the others.
    let word: String
    /// Keycloak's own way to end a session behind a refresh token (`POST` to its logout endpoint); others revoke the
    /// refresh token (RFC 7009) where they advertise a revocation endpoint.
    let endsSessionsByLogoutPost: Bool
    /// Keycloak names Foyer's public origin in tokens it issues through Foyer's `/realms/…` proxy: accept that issuer too.
    let issuerThroughProxy: Bool
    /// The provider holds every account's password (Keycloak): the password form and a password `POST
    /// /api/v1/sessions` go to its password grant, and local accounts are off.
    let checksEveryPassword: Bool
    /// A user whose provider gives no email gets `{username}@{this}`, never deliverable.
    let placeholderEmailDomain: String

    static let defaultScopes = "openid profile email"

    /// `/sign_in/{name}`: starts a browser sign-in; `/callback` and `/backchannel_logout` below it.
    var signInPath: String { "/sign_in/\(name)" }

    /// Roles as the configured claims hold them: a list of strings (Keycloak's `realm_access.roles`, `groups`), or
    /// one string of space- or comma-separated names.
    func roles(in claims: [String: Any]) -> Set<String>? {
        guard let rolesClaims else { return nil }
        var roles: Set<String> = []
        for path in rolesClaims {
            var value: Any? = claims
            for key in path.split(separator: ".") { value = (value as? [String: Any])?[String(key)] }
            if let list = value as? [String] { roles.formUnion(list) }
            if let text = value as? String { roles.formUnion(text.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)) }
        }
        return roles
    }

    /// `Acme SSO` → `acme-sso`.
    static func slug(_ text: String) -> String {
        let lowered = text.lowercased().map { $0.isLetter && $0.isASCII || $0.isNumber && $0.isASCII ? $0 : "-" }
        return String(lowered).split(separator: "-").joined(separator: "-")
    }

    static func commaSeparated(_ text: String?) -> Set<String> {
        Set((text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
    }
}

/// Every provider configured: Keycloak (flags or mobile-services.json), the one of `--oidc-issuer`, and those of
/// `--oidc-providers FILE`. Names are unique; a mistake stops Foyer at start, saying which.
enum ConfiguredProviders {
    /// One entry of the providers file. The secret never sits in the file: `client_secret_env` names the variable.
    struct Entry: Decodable {
        let name: String?
        let displayName: String?
        let issuer: String
        let clientID: String
        let clientSecretEnv: String?
        let scopes: String?
        let rolesClaim: String?
        let appClientIDs: [String]?
        let audiences: [String]?
        let frontChannelLogout: Bool?
        let postLogoutRedirectURI: String?

        enum CodingKeys: String, CodingKey {
            case name, issuer, scopes
            case displayName = "display_name", clientID = "client_id", clientSecretEnv = "client_secret_env", rolesClaim = "roles_claim"
            case appClientIDs = "app_client_ids", audiences, frontChannelLogout = "front_channel_logout"
            case postLogoutRedirectURI = "post_logout_redirect_uri"
        }
    }

    static func all(config: FoyerConfig, keycloak: KeycloakSettings?) throws -> [ProviderSettings] {
        var providers = keycloak.map { [$0.provider] } ?? []
        if let issuer = config.oidcIssuer {
            guard let clientID = config.oidcClientID, !clientID.isEmpty else {
                throw StartupError("OpenID Connect: \(issuer) is configured without a client id (--oidc-client-id or FOYER_OIDC_CLIENT_ID)")
            }
            providers.append(try generic(
                name: nil, displayName: config.oidcName, issuer: issuer, clientID: clientID, clientSecret: config.oidcClientSecret,
                scopes: config.oidcScopes, rolesClaim: config.oidcRolesClaim, appClientIDs: ProviderSettings.commaSeparated(config.oidcAppClientIDs),
                audiences: ProviderSettings.commaSeparated(config.oidcAudience), frontChannelLogout: true, postLogoutRedirectURI: nil
            ))
        }
        if let file = config.oidcProvidersFile {
            let entries: [Entry]
            do {
                entries = try JSONDecoder().decode([Entry].self, from: Data(contentsOf: URL(fileURLWithPath: file)))
            } catch {
                throw StartupError("OpenID Connect: \(file) is not a JSON list of providers ({\"name\", \"issuer\", \"client_id\", …}): \(error)")
            }
            for entry in entries {
                var secret: String?
                if let variable = entry.clientSecretEnv {
                    guard let value = config.environment[variable], !value.isEmpty else {
                        throw StartupError("OpenID Connect: \(entry.issuer)'s client secret should be in \(variable), which is not set")
                    }
                    secret = value
                }
                providers.append(try generic(
                    name: entry.name, displayName: entry.displayName, issuer: entry.issuer, clientID: entry.clientID, clientSecret: secret,
                    scopes: entry.scopes, rolesClaim: entry.rolesClaim, appClientIDs: Set(entry.appClientIDs ?? []),
                    audiences: Set(entry.audiences ?? []), frontChannelLogout: entry.frontChannelLogout ?? true,
                    postLogoutRedirectURI: entry.postLogoutRedirectURI
                ))
            }
        }
        var seen: Set<String> = []
        for provider in providers where !seen.insert(provider.name).inserted {
            throw StartupError("OpenID Connect: two providers are named \(provider.name); give each its own name")
        }
        return providers
    }

    private static func generic(
        name: String?, displayName: String?, issuer: String, clientID: String, clientSecret: String?, scopes: String?, rolesClaim: String?,
        appClientIDs: Set<String>, audiences: Set<String>, frontChannelLogout: Bool, postLogoutRedirectURI: String?
    ) throws -> ProviderSettings {
        guard let url = URL(string: issuer), let host = url.host, ["http", "https"].contains(url.scheme ?? ""), url.query == nil, url.fragment == nil else {
            throw StartupError("OpenID Connect: the issuer must be an http(s) URL without query or fragment, got \(issuer)")
        }
        let displayName = displayName.flatMap { $0.isEmpty ? nil : $0 } ?? host
        let name = ProviderSettings.slug(name ?? displayName)
        guard !name.isEmpty, !["keycloak", "callback"].contains(name) || displayName == "Keycloak" else {
            throw StartupError("OpenID Connect: \(issuer) needs a name of letters or digits other than keycloak (--oidc-name)")
        }
        // Discovery §4: any terminating slash of the issuer goes before the well-known path is appended.
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        return ProviderSettings(
            name: name, displayName: displayName, discoveryURL: base + "/.well-known/openid-configuration", expectedIssuer: issuer,
            clientID: clientID, clientSecret: clientSecret.flatMap { $0.isEmpty ? nil : $0 }, scopes: scopes ?? ProviderSettings.defaultScopes,
            audiences: audiences.isEmpty ? [clientID] : audiences, appClientIDs: appClientIDs,
            rolesClaims: rolesClaim.map { [$0] }, frontChannelLogout: frontChannelLogout, postLogoutRedirectURI: postLogoutRedirectURI,
            word: "provider", endsSessionsByLogoutPost: false, issuerThroughProxy: false, checksEveryPassword: false,
            placeholderEmailDomain: "\(name).oidc.invalid"
        )
    }
}
