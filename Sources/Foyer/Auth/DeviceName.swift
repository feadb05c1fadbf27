/// What a person calls the device behind a session's user agent: "Chrome on macOS", "Safari on iPhone",
/// "Hotwire Native iOS app", "curl". The raw user agent stays in the JSON API; this is for pages.
enum DeviceName {
    static func describe(_ userAgent: String?) -> String {
        guard let agent = userAgent, !agent.isEmpty else { return "Unknown device" }
        // Hotwire Native (and Turbo Native before it) adds its name to the WebView's own user agent.
        if agent.contains("Hotwire Native iOS") || agent.contains("Turbo Native iOS") { return "Hotwire Native iOS app" }
        if agent.contains("Hotwire Native Android") || agent.contains("Turbo Native Android") { return "Hotwire Native Android app" }
        if let tool = tools.first(where: { agent.hasPrefix($0.prefix) }) { return tool.name }
        guard agent.hasPrefix("Mozilla/") else { return "Unknown device" }
        let browser = browsers.first { agent.contains($0.marker) }?.name ?? "A browser"
        guard let system = systems.first(where: { agent.contains($0.marker) })?.name else { return browser }
        return "\(browser) on \(system)"
    }

    /// Command-line tools and HTTP libraries, by the start of their user agent.
    private static let tools: [(prefix: String, name: String)] = [
        ("curl/", "curl"), ("Wget/", "Wget"), ("python-requests/", "Python (requests)"), ("python-httpx/", "Python (httpx)"),
        ("Python-urllib/", "Python (urllib)"), ("okhttp/", "Android app (OkHttp)"), ("Dalvik/", "Android app"),
        ("HTTPie/", "HTTPie"), ("PostmanRuntime/", "Postman"), ("Go-http-client/", "Go program"), ("node-fetch", "Node.js program"),
        ("AsyncHTTPClient", "Swift program"), ("Foyer", "Foyer"),
    ]

    /// In order: Edge and Opera also say Chrome, Chrome also says Safari.
    private static let browsers: [(marker: String, name: String)] = [
        ("Edg/", "Edge"), ("EdgiOS/", "Edge"), ("EdgA/", "Edge"), ("OPR/", "Opera"), ("SamsungBrowser/", "Samsung Internet"),
        ("Firefox/", "Firefox"), ("FxiOS/", "Firefox"), ("CriOS/", "Chrome"), ("Chrome/", "Chrome"), ("Chromium/", "Chromium"),
        ("Version/", "Safari"),
    ]

    /// In order: iPhones and Androids also say "like Mac OS X" and "Linux".
    private static let systems: [(marker: String, name: String)] = [
        ("iPhone", "iPhone"), ("iPad", "iPad"), ("Android", "Android"), ("CrOS", "ChromeOS"), ("Windows", "Windows"),
        ("Macintosh", "macOS"), ("Linux", "Linux"),
    ]
}
