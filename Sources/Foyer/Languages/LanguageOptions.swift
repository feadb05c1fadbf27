import ArgumentParser

/// The language flag of `foyer serve`, one of the `PageOptions`, which also reads its environment variable.
public struct LanguageOptions: ParsableArguments {
    @Option(help: "The language of pages for readers whose account and browser name none of Foyer's: en, pt-BR or zh-Hans (env FOYER_DEFAULT_LOCALE; default en)")
    var defaultLocale: String?

    public init() {}
}
