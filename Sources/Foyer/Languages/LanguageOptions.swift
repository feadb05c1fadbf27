import ArgumentParser

/// The language flag of `foyer serve`; its environment variable gives way to the flag.
public struct LanguageOptions: ParsableArguments {
    @Option(help: "The language of pages for readers whose account and browser name none of Foyer's: en, pt-BR or zh-Hans (env FOYER_DEFAULT_LOCALE; default en)")
    var defaultLocale: String?

    public init() {}

    public func defaultLocale(environment: [String: String]) -> String {
        defaultLocale ?? environment["FOYER_DEFAULT_LOCALE"] ?? "en"
    }
}
