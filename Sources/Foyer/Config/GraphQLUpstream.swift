/// Where the GraphQL task server is, if anywhere: an HTTP URL for queries and mutations, a websocket URL for
/// subscriptions. Flags win over mobile-services.json, and the two URLs always come from the same place.
struct GraphQLUpstream: Sendable, Equatable {
    let url: String
    let webSocketURL: String

    init?(config: FoyerConfig, mobileServices: MobileServices?) {
        if let url = config.graphQLURL {
            self.url = url
            webSocketURL = config.graphQLWebSocketURL ?? Self.webSocketEquivalent(of: url)
        } else if let syncApp = mobileServices?.syncApp {
            url = syncApp.url
            webSocketURL = config.graphQLWebSocketURL ?? syncApp.webSocketURL ?? Self.webSocketEquivalent(of: syncApp.url)
        } else {
            return nil
        }
    }

    /// `http://…` → `ws://…`, `https://…` → `wss://…`.
    static func webSocketEquivalent(of url: String) -> String {
        url.replacingOccurrences(of: "http", with: "ws", options: .anchored)
    }
}
