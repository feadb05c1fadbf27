import Foundation
import FoyerServer
import Logging

/// Everything the application needs to start, resolved from flags and environment by the CLI.
public struct FoyerConfig: Sendable {
    /// An account created on first start when the users table is empty, so a newcomer can sign in at once.
    public struct DemoAccount: Sendable {
        public var email: String
        /// nil means: generate one and print it to the log once.
        public var password: String?

        public init(email: String = "demo@foyer.local", password: String? = nil) {
            self.email = email
            self.password = password
        }
    }

    public var hostname = "127.0.0.1"
    public var port = 8080
    /// A file path, or ":memory:" for a throwaway database.
    public var databasePath = "foyer.sqlite"
    /// Folder holding Templates/, Public/ and path_configuration.json.
    public var resourcesDirectory = FileManager.default.currentDirectoryPath
    public var pathConfigurationFile: String?
    public var turboScriptURL = "/turbo.min.js"
    /// Mark cookies Secure even when no proxy says the request came over https.
    public var secureCookies = false
    /// Believe X-Forwarded-For from the load balancer in front of us when recording a session's IP.
    public var trustProxy = false
    public var passwordHashCost: UInt8 = 12
    public var demoAccount: DemoAccount? = DemoAccount()
    public var logLevel: Logger.Level = .info
    /// Where mail goes and where its links point (`Mail/MailOptions`).
    public var mail = MailSettings()
    /// Whether the server looks after its process's memory: it lets go of the code pages only start-up used, once it
    /// is ready (`StartupCodePages`), and gives freed memory back after a burst of connections (`FreedMemoryTrim`).
    /// `foyer serve` does; an application built inside another process (a test runner) leaves that process alone.
    public var managesProcessMemory = false
    /// Pages register Foyer's service worker, which keeps pages for offline reading and holds writes made offline
    /// until the network is back (see Offline/). Off, the worker served unregisters itself and drops its caches.
    public var offline = true
    /// The upstream GraphQL task server; nil runs the embedded task service in-process.
    public var graphQLURL: String?
    /// The upstream's websocket for subscriptions; default: graphQLURL with ws(s):// (or the sync-app's websocketUrl).
    public var graphQLWebSocketURL: String?
    /// An AeroGear mobile-services.json: its sync-app URL is the upstream unless graphQLURL says otherwise.
    public var mobileServicesFile: String?
    /// A token attached as `Authorization: Bearer` to every upstream GraphQL call (until Keycloak relays per-user tokens).
    public var graphQLUpstreamToken: String?

    /// An Apollo persisted query manifest: when set, `/graphql` runs only its operations (`--graphql-trusted-documents`).
    public var graphQLTrustedDocumentsFile: String?
    /// Clients may query `__schema` and `__type` (`--graphql-introspection=false`: not; the task pages need neither).
    public var graphQLIntrospection = true
    /// Operations one batched `/graphql` request may hold (`--graphql-batch-limit`).
    public var graphQLBatchLimit = 10
    /// Operations each caller may send to `/graphql` (`--graphql-rate-limit`); nil: no limit.
    public var graphQLRateLimit: GraphQLRateLimit? = .standard
    /// How long query answers are kept, and for whom (`--graphql-cache`, `--graphql-cache-scope`).
    public var graphQLCache = GraphQLCacheSettings.standard

    /// Keycloak: base URL (with or without `/auth`), realm and client. Unset: local accounts only, unless the
    /// mobile-services.json names a keycloak service.
    public var keycloakURL: String?
    public var keycloakRealm: String?
    public var keycloakClientID: String?
    /// Comma-separated client ids whose access tokens Foyer accepts as Bearer (`aud` or `azp`); default: the client id.
    public var keycloakAudience: String?
    /// Browser sign-out continues at Keycloak's end_session_endpoint (`--keycloak-front-channel-logout=false`: not).
    public var keycloakFrontChannelLogout = true
    /// Where Keycloak sends the browser after signing out there; nil: Foyer's public origin + `/`.
    public var keycloakPostLogoutRedirectURI: String?
    /// Only ever from the environment; nil for a public client.
    public var keycloakClientSecret: String?
    /// Comma-separated client ids of the native apps whose realm ID tokens `POST /api/v1/sessions` accepts.
    public var keycloakAppClientIDs: String?
    /// Any OpenID Connect provider, by discovery (`--oidc-issuer` and its siblings): one provider besides
    /// Keycloak, named by `--oidc-name`. More come from `--oidc-providers FILE`.
    public var oidcIssuer: String?
    public var oidcClientID: String?
    /// Only ever from the environment (`FOYER_OIDC_CLIENT_SECRET`); nil for a public client.
    public var oidcClientSecret: String?
    public var oidcScopes: String?
    /// What the sign-in button says ("Sign in with …"); its lowercased, dashed form names the provider in URLs
    /// and in native sign-ins.
    public var oidcName: String?
    /// The claim holding a user's roles (a dotted path, e.g. `groups` or `realm_access.roles`); unset: no roles.
    public var oidcRolesClaim: String?
    /// Comma-separated client ids of the native apps whose ID tokens `POST /api/v1/sessions` accepts.
    public var oidcAppClientIDs: String?
    /// Comma-separated client ids whose access tokens are accepted as Bearer; default: the client id.
    public var oidcAudience: String?
    /// A JSON file listing several providers (`[{"name", "issuer", "client_id", …}]`); secrets stay in the environment.
    public var oidcProvidersFile: String?
    /// The same verified email through two providers is one Foyer user (`--oidc-link-verified-email`); otherwise each
    /// provider's `sub` is a user of its own.
    public var oidcLinkVerifiedEmail = false
    /// A native app's ID token older than this is refused at `POST /api/v1/sessions` (`--oidc-id-token-max-age`).
    public var oidcIDTokenMaximumAge: TimeInterval = 600
    /// Every variable of the environment Foyer started in: secrets named in the providers file are read from it.
    public var environment: [String: String] = [:]
    /// Signs the live stream names pages embed; nil: one generated and kept in the database. Instances that share
    /// a database share it; set it by hand only if they do not.
    public var streamSecret: String?
    /// Sessions end after this long unused, or this long after sign-in (`--session-idle-timeout`, `--session-lifetime`).
    public var sessionLifetime = SessionLifetime()
    /// A Unified Push Server that devices are registered at (`--push-url`; else the push service of mobile-services.json).
    public var pushURL: String?
    public var pushIOSVariantID: String?
    public var pushAndroidVariantID: String?
    /// Only ever from the environment.
    public var pushIOSVariantSecret: String?
    public var pushAndroidVariantSecret: String?
    /// The sender API's credentials, only ever from the environment.
    public var pushApplicationID: String?
    public var pushMasterSecret: String?
    /// Send task changes to devices; nil: yes when the sender's credentials are set.
    public var pushNotifyTasks: Bool?
    /// The drain on SIGTERM and the listening socket (`Deploying/DeployOptions`).
    public var deploy = DeploySettings()
    /// HTTPS from certificate files and the plain-HTTP port's redirect (`HTTPS/HTTPSOptions`).
    public var https = HTTPSSettings()
    /// The terms people accept before posting, and the operator's address (`Moderation/ModerationOptions`).
    public var moderation = ModerationSettings()
    /// Whether writes to posts must name the version they change (`Posts/PostsOptions`).
    public var posts = PostsSettings()
    /// Passkeys' relying party, and the apps that share them and open Foyer's links.
    public var passkeys = PasskeySettings()
    /// The language of pages for readers whose account and browser name none of Foyer's (`Languages/LanguageOptions`).
    public var defaultLocale = "en"
    /// Timeouts, limits and the connection cap at the edge (`--header-timeout`, `--idle-timeout`, `--max-connections`).
    public var edge = EdgeSettings()
    /// When set, `GET /metrics` asks for this Bearer token.
    public var metricsToken: String?
    /// Where the metrics are kept; nil: a registry of this application's own (tests build many in one process).
    public var metrics: FoyerMetrics?

    public init() {}

    var templatesDirectory: String { resourcesDirectory + "/Templates" }
    var publicDirectory: String { resourcesDirectory + "/Public" }
    var resolvedPathConfigurationFile: String { pathConfigurationFile ?? resourcesDirectory + "/path_configuration.json" }
}
