import ArgumentParser
import Foundation
import Foyer
import FoyerServer
import Hummingbird
import Logging
import Metrics
import NIOCore
import NIOPosix
import Prometheus

@main
enum Main {
    static func main() async {
        StartupTimeline.begin()
        // Requests, their upstream calls and the database's answers then all run on NIO's event loops (one per
        // core) instead of hopping to Swift's own thread pool and back: on the /graphql proxy path every hop
        // was a thread wake-up. Must come first, before any task is started.
        _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        // With TZ unset, glibc stats /etc/localtime on every local time it makes: a syscall for each log line's
        // timestamp, every request. Named, it is read once (a change of zone then needs a restart, as for nginx).
        if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        if FoyerCommand.willServe(arguments: CommandLine.arguments.dropFirst()) {
            readLanguageCatalogsAhead()
            compileViewsAhead()
        }
        await FoyerCommand.main()
    }
}

struct FoyerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "foyer",
        abstract: "Foyer: the backend-for-frontend of hybrid (Hotwire Native) apps and their web twins.",
        subcommands: [Serve.self, Migrate.self, UserCommand.self],
        defaultSubcommand: Serve.self
    )

    /// Whether these arguments run the server (named, or as the default command), so that work done ahead for it
    /// is not done for `migrate`, `user` or a request for help.
    static func willServe(arguments: ArraySlice<String>) -> Bool {
        if arguments.contains(where: { ["-h", "--help", "--version"].contains($0) }) { return false }
        guard let first = arguments.first else { return true }
        return first == Serve.configuration.commandName || first.hasPrefix("-")
    }
}

/// Options every command takes. A flag wins over its environment variable, which wins over the default.
struct CommonOptions: ParsableArguments {
    @Option(help: "SQLite database file, :memory:, or postgres://user:password@host:port/db?sslmode=… to share one among instances (env FOYER_DATABASE; default foyer.sqlite)")
    var database: String?

    var databasePath: String {
        database ?? ProcessInfo.processInfo.environment["FOYER_DATABASE"] ?? "foyer.sqlite"
    }

    /// The database opened and up to date; a clear message and exit 1 when that cannot be.
    func openStore(logLevel: Logger.Level = .info) async throws -> Store {
        var logger = Logger(label: "foyer")
        logger.logLevel = logLevel
        do {
            return try await Store.open(databasePath, logger: logger)
        } catch let error as PostgresStore.Unreachable {
            FileHandle.standardError.write(Data("Foyer cannot start: \(error)\n".utf8))
            throw ExitCode.failure
        } catch let error as PostgresLocation.Invalid {
            throw ValidationError("--database: \(error)")
        }
    }

    var redactedDatabase: String { (try? StoreLocation(databasePath).description) ?? databasePath }
}

struct Serve: AsyncParsableCommand {
    // Named, not derived from the type's name: ArgumentParser derives it (reflection, then snake case) every time it
    // asks, and it asks for every command at every start.
    static let configuration = CommandConfiguration(commandName: "serve", abstract: "Run the HTTP server (the default command).")

    @OptionGroup var common: CommonOptions

    @OptionGroup(title: "Mail") var mail: MailOptions

    @OptionGroup(title: "Deploying") var deploy: DeployOptions

    @OptionGroup(title: "HTTPS") var https: HTTPSOptions

    @OptionGroup(title: "Moderation") var moderation: ModerationOptions

    @OptionGroup(title: "Posts") var posts: PostsOptions
    @OptionGroup(title: "Passkeys and app links") var passkeys: PasskeyOptions

    @Option(help: "Address to listen on (env FOYER_HOSTNAME; default 127.0.0.1)")
    var hostname: String?

    @Option(help: "Port to listen on (env FOYER_PORT or PORT; default 8080)")
    var port: Int?

    @OptionGroup var pages: PageOptions

    @Option(help: "Path configuration file (env FOYER_PATH_CONFIGURATION; default ROOT/path_configuration.json)")
    var pathConfiguration: String?

    @Flag(help: "Always mark the session cookie Secure (env FOYER_SECURE_COOKIES=1); it is anyway when X-Forwarded-Proto is https")
    var secureCookies = false

    @Flag(help: "Behind a load balancer: take the client IP from X-Forwarded-For (env FOYER_TRUST_PROXY=1)")
    var trustProxy = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error (env LOG_LEVEL; default info)")
    var logLevel: String?

    @Option(help: "Log lines as text or json, one JSON object per line for log shippers (env FOYER_LOG_FORMAT; default text)")
    var logFormat: String?

    @Option(help: "GET /metrics asks for this Bearer token (env FOYER_METRICS_TOKEN; default: /metrics is open)")
    var metricsToken: String?

    @Option(help: "Upstream GraphQL task server (env FOYER_GRAPHQL_URL; default: the sync-app of --mobile-services, else the embedded task service)")
    var graphqlURL: String?

    @Option(name: .customLong("graphql-ws-url"), help: "Its websocket for subscriptions (env FOYER_GRAPHQL_WS_URL; default: the GraphQL URL with ws:// or wss://)")
    var graphqlWebSocketURL: String?

    @Option(help: "An Apollo persisted query manifest (persisted-query-manifest.json); when set, /graphql runs only its operations, by id or by body (env FOYER_GRAPHQL_TRUSTED_DOCUMENTS)")
    var graphqlTrustedDocuments: String?

    @Option(help: "Clients may send introspection queries (__schema, __type) to /graphql (env FOYER_GRAPHQL_INTROSPECTION; default true)")
    var graphqlIntrospection: Bool?

    @Option(help: "Operations one batched /graphql request may hold (env FOYER_GRAPHQL_BATCH_LIMIT; default 10)")
    var graphqlBatchLimit: Int?

    @Option(help: "GraphQL operations each signed-in user may send, over HTTP and websockets: 300/min, 20/s, 5000/h, or off (env FOYER_GRAPHQL_RATE_LIMIT; default \(GraphQLRateLimit.standard))")
    var graphqlRateLimit: String?

    @Option(help: "Keep query answers without errors at most this long (until a task change drops them): 30s, 5m, or off (env FOYER_GRAPHQL_CACHE; default 30s)")
    var graphqlCache: String?

    @Option(help: "Whom a kept answer serves: user (the one it was fetched for) or shared (every caller, for upstreams that answer everyone alike) (env FOYER_GRAPHQL_CACHE_SCOPE; default user)")
    var graphqlCacheScope: String?

    @Option(help: "An AeroGear mobile-services.json naming the upstreams (env FOYER_MOBILE_SERVICES)")
    var mobileServices: String?

    @Option(help: "Keycloak base URL, with or without /auth (env FOYER_KEYCLOAK_URL; default: the keycloak service of --mobile-services, else local accounts)")
    var keycloakURL: String?

    @Option(help: "Keycloak realm (env FOYER_KEYCLOAK_REALM)")
    var keycloakRealm: String?

    @Option(help: "Keycloak client id (env FOYER_KEYCLOAK_CLIENT_ID; its secret only from env FOYER_KEYCLOAK_CLIENT_SECRET)")
    var keycloakClientID: String?

    @Option(help: "Client ids whose Keycloak access tokens are accepted as Bearer, comma-separated (env FOYER_KEYCLOAK_AUDIENCE; default: the client id)")
    var keycloakAudience: String?

    @Option(help: "Signing a browser out also ends its Keycloak session at the realm's end_session_endpoint (env FOYER_KEYCLOAK_FRONT_CHANNEL_LOGOUT; default true)")
    var keycloakFrontChannelLogout: Bool?

    @Option(help: "Where Keycloak sends the browser after signing out (env FOYER_KEYCLOAK_POST_LOGOUT_REDIRECT_URI; default: Foyer's public origin + /)")
    var keycloakPostLogoutRedirectURI: String?

    @Option(name: .customLong("keycloak-app-client-ids"), help: "Client ids of the native apps whose realm ID tokens POST /api/v1/sessions accepts, comma-separated (env FOYER_KEYCLOAK_APP_CLIENT_IDS)")
    var keycloakAppClientIDs: String?

    @Option(help: "An OpenID Connect provider's issuer URL; its discovery document names the rest (env FOYER_OIDC_ISSUER; secret only from env FOYER_OIDC_CLIENT_SECRET)")
    var oidcIssuer: String?

    @Option(help: "Foyer's client id at that provider (env FOYER_OIDC_CLIENT_ID)")
    var oidcClientID: String?

    @Option(help: "Scopes asked for (env FOYER_OIDC_SCOPES; default \"openid profile email\")")
    var oidcScopes: String?

    @Option(help: "What the sign-in button says; lowercased and dashed, it names the provider in URLs and native sign-ins (env FOYER_OIDC_NAME; default: the issuer's host)")
    var oidcName: String?

    @Option(help: "The claim holding a user's roles, a dotted path such as groups (env FOYER_OIDC_ROLES_CLAIM; default: no roles)")
    var oidcRolesClaim: String?

    @Option(name: .customLong("oidc-app-client-ids"), help: "Client ids of the native apps whose ID tokens POST /api/v1/sessions accepts, comma-separated (env FOYER_OIDC_APP_CLIENT_IDS)")
    var oidcAppClientIDs: String?

    @Option(help: "Client ids whose access tokens are accepted as Bearer, comma-separated (env FOYER_OIDC_AUDIENCE; default: the client id)")
    var oidcAudience: String?

    @Option(help: "A JSON file listing several OpenID Connect providers (env FOYER_OIDC_PROVIDERS)")
    var oidcProviders: String?

    @Option(help: "The same verified email through two providers is one Foyer user (env FOYER_OIDC_LINK_VERIFIED_EMAIL; default false)")
    var oidcLinkVerifiedEmail: Bool?

    @Option(name: .customLong("oidc-id-token-max-age"), help: "Refuse a native app's ID token issued longer ago than this: 10m, 90s or seconds (env FOYER_OIDC_ID_TOKEN_MAX_AGE; default 10m)")
    var oidcIDTokenMaxAge: String?

    @Option(help: "Unified Push Server that devices are registered at (env FOYER_PUSH_URL; default: the push service of --mobile-services)")
    var pushURL: String?

    @Option(help: "Its iOS variant (env FOYER_PUSH_IOS_VARIANT_ID; the secret only from env FOYER_PUSH_IOS_VARIANT_SECRET)")
    var pushIosVariantId: String?

    @Option(help: "Its Android variant (env FOYER_PUSH_ANDROID_VARIANT_ID; the secret only from env FOYER_PUSH_ANDROID_VARIANT_SECRET)")
    var pushAndroidVariantId: String?

    @Option(help: "Send task changes to the other users' devices (env FOYER_PUSH_NOTIFY_TASKS; default true when FOYER_PUSH_APPLICATION_ID and FOYER_PUSH_MASTER_SECRET are set)")
    var pushNotifyTasks: Bool?

    @Option(help: "End a session unused this long: 30d, 12h, 45m, 90s or seconds (env FOYER_SESSION_IDLE_TIMEOUT; default 30d)")
    var sessionIdleTimeout: String?

    @Option(help: "End a session this long after sign-in, used or not; also the cookie's Max-Age (env FOYER_SESSION_LIFETIME; default 365d)")
    var sessionLifetime: String?

    @Option(help: "Close a connection whose request head has not arrived this long after its first byte, or after the connection opened: 30s, 2m or seconds (env FOYER_HEADER_TIMEOUT; default 30s). Also how long a body may pause and a response may go unread")
    var headerTimeout: String?

    @Option(help: "Close a kept-alive connection with no request under way after this: 75s, 2m or seconds (env FOYER_IDLE_TIMEOUT; default 75s)")
    var idleTimeout: String?

    @Option(help: "Open client connections at most; more are closed at once (env FOYER_MAX_CONNECTIONS; default: the open-file limit less a twentieth, at least 256)")
    var maxConnections: Int?

    func run() async throws {
        StartupTimeline.reached("command_line")
        let environment = ProcessInfo.processInfo.environment
        let formatName = logFormat ?? environment["FOYER_LOG_FORMAT"] ?? "text"
        guard let format = LogFormat(rawValue: formatName.lowercased()) else {
            throw ValidationError("--log-format: \"\(formatName)\" is not a log format; use text or json")
        }
        format.bootstrap()
        EdgeSettings.raiseOpenFileLimit()
        var config = FoyerConfig()
        if let text = sessionIdleTimeout ?? environment["FOYER_SESSION_IDLE_TIMEOUT"] {
            config.sessionLifetime.idleTimeout = try Self.duration(text, option: "--session-idle-timeout")
        }
        if let text = sessionLifetime ?? environment["FOYER_SESSION_LIFETIME"] {
            config.sessionLifetime.lifetime = try Self.duration(text, option: "--session-lifetime")
        }
        if let text = oidcIDTokenMaxAge ?? environment["FOYER_OIDC_ID_TOKEN_MAX_AGE"] {
            config.oidcIDTokenMaximumAge = try Self.duration(text, option: "--oidc-id-token-max-age")
        }
        if let text = headerTimeout ?? environment["FOYER_HEADER_TIMEOUT"] {
            config.edge.headerTimeout = .milliseconds(Int64(try Self.duration(text, option: "--header-timeout") * 1000))
        }
        if let text = idleTimeout ?? environment["FOYER_IDLE_TIMEOUT"] {
            config.edge.idleTimeout = .milliseconds(Int64(try Self.duration(text, option: "--idle-timeout") * 1000))
        }
        if let cap = maxConnections ?? environment["FOYER_MAX_CONNECTIONS"].flatMap({ Int($0) }) {
            guard cap > 0 else { throw ValidationError("--max-connections: give a positive number of connections") }
            config.edge.maximumConnections = cap
        }
        config.databasePath = common.databasePath
        config.managesProcessMemory = true
        config.hostname = hostname ?? environment["FOYER_HOSTNAME"] ?? config.hostname
        if let port = port ?? (environment["FOYER_PORT"] ?? environment["PORT"]).flatMap({ Int($0) }) {
            config.port = port
        }
        pages.apply(to: &config, environment: environment)
        config.pathConfigurationFile = pathConfiguration ?? environment["FOYER_PATH_CONFIGURATION"]
        config.secureCookies = secureCookies || environment["FOYER_SECURE_COOKIES"] == "1"
        config.trustProxy = trustProxy || environment["FOYER_TRUST_PROXY"] == "1"
        if let level = (logLevel ?? environment["LOG_LEVEL"]).flatMap({ Logger.Level(rawValue: $0) }) {
            config.logLevel = level
        }
        config.graphQLURL = graphqlURL ?? environment["FOYER_GRAPHQL_URL"]
        config.graphQLWebSocketURL = graphqlWebSocketURL ?? environment["FOYER_GRAPHQL_WS_URL"]
        config.graphQLUpstreamToken = environment["FOYER_GRAPHQL_TOKEN"]
        config.graphQLTrustedDocumentsFile = graphqlTrustedDocuments ?? environment["FOYER_GRAPHQL_TRUSTED_DOCUMENTS"]
        if let introspection = graphqlIntrospection ?? environment["FOYER_GRAPHQL_INTROSPECTION"].flatMap({ Bool($0.lowercased()) }) {
            config.graphQLIntrospection = introspection
        }
        if let limit = graphqlBatchLimit ?? environment["FOYER_GRAPHQL_BATCH_LIMIT"].flatMap({ Int($0) }) {
            guard limit > 0 else { throw ValidationError("--graphql-batch-limit: give a positive number of operations") }
            config.graphQLBatchLimit = limit
        }
        if let text = graphqlRateLimit ?? environment["FOYER_GRAPHQL_RATE_LIMIT"] {
            switch GraphQLRateLimit.parse(text) {
            case .success(let limit): config.graphQLRateLimit = limit
            case .failure(let invalid): throw ValidationError("--graphql-rate-limit: \(invalid)")
            }
        }
        if let text = graphqlCache ?? environment["FOYER_GRAPHQL_CACHE"] {
            config.graphQLCache.lifetime = text.trimmingCharacters(in: .whitespaces).lowercased() == "off"
                ? nil : try Self.duration(text, option: "--graphql-cache", orOff: true)
        }
        if let text = graphqlCacheScope ?? environment["FOYER_GRAPHQL_CACHE_SCOPE"] {
            guard let scope = GraphQLCacheSettings.Scope(rawValue: text.trimmingCharacters(in: .whitespaces).lowercased()) else {
                throw ValidationError("--graphql-cache-scope: \"\(text)\" is not a scope; write user or shared")
            }
            config.graphQLCache.scope = scope
        }
        config.mobileServicesFile = mobileServices ?? environment["FOYER_MOBILE_SERVICES"]
        config.keycloakURL = keycloakURL ?? environment["FOYER_KEYCLOAK_URL"]
        config.keycloakRealm = keycloakRealm ?? environment["FOYER_KEYCLOAK_REALM"]
        config.keycloakClientID = keycloakClientID ?? environment["FOYER_KEYCLOAK_CLIENT_ID"]
        config.keycloakAudience = keycloakAudience ?? environment["FOYER_KEYCLOAK_AUDIENCE"]
        config.keycloakClientSecret = environment["FOYER_KEYCLOAK_CLIENT_SECRET"]
        if let frontChannel = keycloakFrontChannelLogout ?? environment["FOYER_KEYCLOAK_FRONT_CHANNEL_LOGOUT"].flatMap({ Bool($0.lowercased()) }) {
            config.keycloakFrontChannelLogout = frontChannel
        }
        config.keycloakPostLogoutRedirectURI = keycloakPostLogoutRedirectURI ?? environment["FOYER_KEYCLOAK_POST_LOGOUT_REDIRECT_URI"]
        config.oidcIssuer = oidcIssuer ?? environment["FOYER_OIDC_ISSUER"]
        config.oidcClientID = oidcClientID ?? environment["FOYER_OIDC_CLIENT_ID"]
        config.oidcClientSecret = environment["FOYER_OIDC_CLIENT_SECRET"]
        config.oidcScopes = oidcScopes ?? environment["FOYER_OIDC_SCOPES"]
        config.oidcName = oidcName ?? environment["FOYER_OIDC_NAME"]
        config.oidcRolesClaim = oidcRolesClaim ?? environment["FOYER_OIDC_ROLES_CLAIM"]
        config.oidcAppClientIDs = oidcAppClientIDs ?? environment["FOYER_OIDC_APP_CLIENT_IDS"]
        config.oidcAudience = oidcAudience ?? environment["FOYER_OIDC_AUDIENCE"]
        config.oidcProvidersFile = oidcProviders ?? environment["FOYER_OIDC_PROVIDERS"]
        if let link = oidcLinkVerifiedEmail ?? environment["FOYER_OIDC_LINK_VERIFIED_EMAIL"].flatMap({ Bool($0.lowercased()) }) {
            config.oidcLinkVerifiedEmail = link
        }
        config.environment = environment
        config.keycloakAppClientIDs = keycloakAppClientIDs ?? environment["FOYER_KEYCLOAK_APP_CLIENT_IDS"]
        config.streamSecret = environment["FOYER_STREAM_SECRET"]
        config.pushURL = pushURL ?? environment["FOYER_PUSH_URL"]
        config.pushIOSVariantID = pushIosVariantId ?? environment["FOYER_PUSH_IOS_VARIANT_ID"]
        config.pushAndroidVariantID = pushAndroidVariantId ?? environment["FOYER_PUSH_ANDROID_VARIANT_ID"]
        config.pushIOSVariantSecret = environment["FOYER_PUSH_IOS_VARIANT_SECRET"]
        config.pushAndroidVariantSecret = environment["FOYER_PUSH_ANDROID_VARIANT_SECRET"]
        config.pushApplicationID = environment["FOYER_PUSH_APPLICATION_ID"]
        config.pushMasterSecret = environment["FOYER_PUSH_MASTER_SECRET"]
        if let notify = pushNotifyTasks ?? environment["FOYER_PUSH_NOTIFY_TASKS"].flatMap({ Bool($0.lowercased()) }) {
            config.pushNotifyTasks = notify
        }
        config.mail = try mail.settings(environment: environment)
        config.deploy = try deploy.settings(environment: environment)
        config.https = try https.settings(environment: environment)
        config.moderation = try moderation.settings(environment: environment)
        config.posts = posts.settings(environment: environment)
        config.passkeys = try passkeys.settings(environment: environment)
        // Served over HTTPS, cookies are Secure (they are also when a balancer says it terminated TLS).
        if config.https.isOn { config.secureCookies = true }
        config.metricsToken = (metricsToken ?? environment["FOYER_METRICS_TOKEN"]).flatMap { $0.isEmpty ? nil : $0 }
        // Libraries that report through swift-metrics land in the same scrape as Foyer's own metrics.
        let metrics = FoyerMetrics()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics.registry))
        config.metrics = metrics
        config.demoAccount = FoyerConfig.DemoAccount(
            email: environment["FOYER_DEMO_EMAIL"] ?? "demo@foyer.local",
            password: environment["FOYER_DEMO_PASSWORD"]
        )
        let (common, logLevel) = (common, config.logLevel)
        do {
            let app = try await buildApplication(config) { _ in try await common.openStore(logLevel: logLevel) }
            // Until SIGTERM or SIGINT is drained (FoyerApplication.run).
            try await app.run()
        } catch let error as StartupError {
            FileHandle.standardError.write(Data("Foyer cannot start: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}

extension Serve {
    /// `30d`, `12h`, `45m`, `90s` or a number of seconds.
    static func duration(_ text: String, option: String, orOff: Bool = false) throws -> TimeInterval {
        try DurationText.seconds(text, option: option, orOff: orOff)
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "migrate", abstract: "Create or update the database schema, then exit.")

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let store = try await common.openStore()
        if case .postgres(let postgres) = store { postgres.close() }
        print("Database \(common.redactedDatabase) is up to date.")
    }
}

struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "Manage local accounts.", subcommands: [AddUser.self, SetRole.self]
    )
}

struct AddUser: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Create a local account; the password is read from standard input."
    )

    @OptionGroup var common: CommonOptions

    @Argument(help: "The account's email address")
    var email: String

    @Option(help: "The name others see beside the account's posts (default: the part of the address before @)")
    var name: String?

    func run() async throws {
        guard let line = readLine(strippingNewline: true), !line.isEmpty else {
            throw ValidationError("Give the password on standard input, e.g. `echo 'secret password' | foyer user add \(email)`")
        }
        let store = try await common.openStore()
        defer { if case .postgres(let postgres) = store { postgres.close() } }
        do {
            let user = try await UserRepository(store: store).create(email: email, password: line, name: name)
            print("Created user \(user.id ?? 0) \(user.name) <\(user.email)>.")
        } catch let error as UserError {
            throw ValidationError(error.description)
        }
    }
}

struct SetRole: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "role", abstract: "Make an account a moderator or an admin, or take its role away (none); sessions see it within a minute."
    )

    @OptionGroup var common: CommonOptions

    @Argument(help: "The account's email address")
    var email: String

    @Argument(help: "moderator, admin or none")
    var role: String

    func run() async throws {
        let newRole: User.Role?
        switch role.lowercased() {
        case "none": newRole = nil
        default:
            guard let known = User.Role(rawValue: role.lowercased()) else {
                throw ValidationError("\"\(role)\" is not a role: say moderator, admin or none")
            }
            newRole = known
        }
        let store = try await common.openStore()
        defer { if case .postgres(let postgres) = store { postgres.close() } }
        guard let user = try await UserRepository(store: store).setRole(newRole, email: email) else {
            throw ValidationError("No account has the address \(email)")
        }
        print("\(user.name) <\(user.email)> is now \(newRole.map { "a\($0 == .admin ? "n" : "") \($0.rawValue)" } ?? "without a role").")
    }
}
