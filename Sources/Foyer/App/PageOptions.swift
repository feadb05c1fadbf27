import ArgumentParser

/// The flags of `foyer serve` that decide how pages are made: where the templates are, Turbo's script, the offline
/// worker, the readers' default language. Their environment variables give way to the flags. `Views.compileAhead`
/// reads the same settings before the flags are parsed (`fromEnvironment`), so its guess is the one `serve` makes
/// when no flag says otherwise.
public struct PageOptions: ParsableArguments {
    @Option(help: "Folder holding Templates/, Public/ and path_configuration.json (env FOYER_ROOT; default: the working directory)")
    var root: String?

    @Option(help: "URL of Turbo's JavaScript (env FOYER_TURBO_URL; default /turbo.min.js from Public/)")
    var turboURL: String?

    @Option(help: "Pages work offline: a service worker keeps visited pages and holds writes until the network is back (env FOYER_OFFLINE; default true)")
    var offline: Bool?

    @OptionGroup(title: "Languages") var languages: LanguageOptions

    public init() {}

    public func apply(to config: inout FoyerConfig, environment: [String: String]) {
        Self.apply(root: root, turboURL: turboURL, offline: offline, defaultLocale: languages.defaultLocale,
                   to: &config, environment: environment)
    }

    /// The settings as the environment alone gives them: what `serve` uses when no flag is given.
    static func fromEnvironment(_ environment: [String: String]) -> FoyerConfig {
        var config = FoyerConfig()
        apply(root: nil, turboURL: nil, offline: nil, defaultLocale: nil, to: &config, environment: environment)
        return config
    }

    private static func apply(
        root: String?, turboURL: String?, offline: Bool?, defaultLocale: String?,
        to config: inout FoyerConfig, environment: [String: String]
    ) {
        config.resourcesDirectory = root ?? environment["FOYER_ROOT"] ?? config.resourcesDirectory
        config.turboScriptURL = turboURL ?? environment["FOYER_TURBO_URL"] ?? config.turboScriptURL
        if let offline = offline ?? environment["FOYER_OFFLINE"].flatMap({ Bool($0.lowercased()) }) {
            config.offline = offline
        }
        config.defaultLocale = defaultLocale ?? environment["FOYER_DEFAULT_LOCALE"] ?? config.defaultLocale
    }
}
