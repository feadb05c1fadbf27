import Foundation
import FoyerServer

/// An AeroGear `mobile-services.json`: `{"version", "namespace", "clientId", "clusterName", "services": [...]}`
/// with services of type `sync-app`, `keycloak` and `push`. Read leniently (`version` may be a string,
/// `variantId` may be `variantID`, unknown services are kept), rejected at start when it is not that shape.
public struct MobileServices: Sendable {
    public struct SyncApp: Sendable, Equatable {
        public let url: String
        public let webSocketURL: String?
    }

    public struct Keycloak: Sendable, Equatable {
        public let authServerURL: String
        public let realm: String
        public let clientID: String
        public let publicClient: Bool
    }

    /// A Unified Push Server: its URL and, per platform, a variant's id and (in files kept from apps) its secret.
    struct Push: Sendable {
        struct Variant: Sendable {
            let id: String?
            let secret: String?
        }
        let url: String
        let variants: [PushSettings.Platform: Variant]
    }

    public let syncApp: SyncApp?
    public let keycloak: Keycloak?
    let push: Push?
    /// The file as read, to serve a client-facing copy from.
    let document: [String: any Sendable]

    public init(contentsOf path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StartupError("mobile services: cannot read \(path)")
        }
        try self.init(data: data, source: path)
    }

    public init(data: Data, source: String = "mobile-services.json") throws {
        let problem = { (message: String) in StartupError("\(source): \(message)") }
        guard let root = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw problem("not a JSON object")
        }
        if let version = root["version"], !(version is NSNumber), Int(version as? String ?? "") == nil {
            throw problem("version must be a number (or a number in a string)")
        }
        guard let services = root["services"] as? [Any] else { throw problem("services must be an array") }
        var syncApp: SyncApp?
        var keycloak: Keycloak?
        var push: Push?
        for (index, entry) in services.enumerated() {
            guard let service = entry as? [String: Any], let type = service["type"] as? String else {
                throw problem("services[\(index)] must be an object with a type")
            }
            let config = service["config"] as? [String: Any] ?? [:]
            switch type {
            case "sync-app":
                guard let url = service["url"] as? String, URL(string: url)?.host != nil else {
                    throw problem("services[\(index)] (sync-app) needs a url")
                }
                syncApp = SyncApp(url: url, webSocketURL: config["websocketUrl"] as? String)
            case "keycloak":
                guard let server = config["auth-server-url"] as? String, let realm = config["realm"] as? String,
                    let resource = config["resource"] as? String
                else {
                    throw problem("services[\(index)] (keycloak) needs config.auth-server-url, config.realm and config.resource")
                }
                keycloak = Keycloak(authServerURL: server, realm: realm, clientID: resource, publicClient: Self.flag(config["public-client"]))
            case "push":
                guard let url = service["url"] as? String, URL(string: url)?.host != nil else {
                    throw problem("services[\(index)] (push) needs a url")
                }
                var variants: [PushSettings.Platform: Push.Variant] = [:]
                for platform in PushSettings.Platform.allCases {
                    guard let variant = config[platform.rawValue] as? [String: Any] else { continue }
                    variants[platform] = Push.Variant(
                        id: (variant["variantId"] ?? variant["variantID"]) as? String, secret: variant["variantSecret"] as? String
                    )
                }
                push = Push(url: url, variants: variants)
            default:
                break  // anything newer: served on as it is, minus secrets
            }
        }
        self.syncApp = syncApp
        self.keycloak = keycloak
        self.push = push
        self.document = Self.sendable(root) as? [String: any Sendable] ?? [:]
    }

    /// What Foyer serves when no file was given: no services yet; `clientFacing` adds the ones Foyer provides.
    static let embedded = MobileServices(
        syncApp: nil, keycloak: nil, push: nil,
        document: ["version": 1, "namespace": "foyer", "clientId": "foyer", "clusterName": "foyer", "services": [any Sendable]()]
    )

    private init(syncApp: SyncApp?, keycloak: Keycloak?, push: Push?, document: [String: any Sendable]) {
        self.syncApp = syncApp
        self.keycloak = keycloak
        self.push = push
        self.document = document
    }

    /// The copy apps download from Foyer: sync-app URLs point at Foyer's own `/graphql`, secrets are gone. Foyer
    /// always serves GraphQL, so a sync-app entry is added when the file has none; so is a keycloak entry when Keycloak
    /// is configured by flags, naming Foyer (which forwards `/realms/…` to it) as the auth server.
    func clientFacing(baseURL: String, keycloak settings: KeycloakSettings? = nil) throws -> Data {
        var root = document
        let webSocketBase = GraphQLUpstream.webSocketEquivalent(of: baseURL)
        var services = document["services"] as? [any Sendable] ?? []
        let types = Set(services.compactMap { ($0 as? [String: any Sendable])?["type"] as? String })
        if !types.contains("sync-app") {
            services.insert(["id": "sync-app", "name": "sync-app", "type": "sync-app", "url": "", "config": [String: any Sendable]()] as [String: any Sendable], at: 0)
        }
        if !types.contains("keycloak"), let settings {
            services.append([
                "id": "keycloak", "name": "keycloak", "type": "keycloak", "url": baseURL,
                "config": [
                    "auth-server-url": baseURL, "realm": settings.realm, "resource": settings.clientID,
                    "public-client": settings.clientSecret == nil, "ssl-required": "external",
                ] as [String: any Sendable],
            ] as [String: any Sendable])
        }
        root["services"] = services.map { entry -> any Sendable in
            guard var service = entry as? [String: any Sendable] else { return entry }
            var config = service["config"] as? [String: any Sendable] ?? [:]
            if service["type"] as? String == "sync-app" {
                service["url"] = baseURL + "/graphql"
                config["websocketUrl"] = webSocketBase + "/graphql"
            }
            service["config"] = Self.withoutSecrets(config)
            return service
        }
        return try JSONSerialization.data(withJSONObject: root, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    /// Drops every key that names a secret, at any depth (`variantSecret`, `credentials.secret`, …).
    static func withoutSecrets(_ object: [String: any Sendable]) -> [String: any Sendable] {
        var kept: [String: any Sendable] = [:]
        for (key, value) in object where !key.lowercased().contains("secret") {
            kept[key] = (value as? [String: any Sendable]).map(withoutSecrets) ?? value
        }
        return kept
    }

    /// `true`, `"true"` and `1` all mean yes: these files are hand-edited.
    static func flag(_ value: Any?) -> Bool {
        switch value {
        case let bool as Bool: bool
        case let string as String: string.lowercased() == "true"
        case let number as NSNumber: number.boolValue
        default: false
        }
    }

    private static func sendable(_ value: Any) -> any Sendable {
        switch value {
        case let object as [String: Any]: object.mapValues(sendable)
        case let array as [Any]: array.map(sendable)
        case let string as String: string
        case let number as NSNumber: number
        default: NSNull()
        }
    }
}
