import ArgumentParser

/// What an operator says about writes to posts.
public struct PostsSettings: Sendable {
    /// A write that names no version (no `If-Match`, no `version` in the body) is refused with `428` (RFC 6585)
    /// instead of applied over whatever the post is now.
    public var requirePreconditions = false

    public init() {}
}

/// The posts flags of `foyer serve`; each has an environment variable, and a flag wins over its variable.
public struct PostsOptions: ParsableArguments {
    @Flag(help: "Refuse a write to a post that names no version (no If-Match, no version) with 428, instead of applying it over whatever is there (env FOYER_REQUIRE_PRECONDITIONS=true)")
    var requirePreconditions = false

    public init() {}

    public func settings(environment: [String: String]) -> PostsSettings {
        var settings = PostsSettings()
        settings.requirePreconditions = requirePreconditions || ["1", "true", "yes"].contains(environment["FOYER_REQUIRE_PRECONDITIONS"]?.lowercased() ?? "")
        return settings
    }
}
