import Foundation
import FoyerServer

/// The Unified Push Server Foyer relays device registrations to, and sends through: from flags and env, else from
/// the `push` service of mobile-services.json. Secrets come from the environment (or that file, which apps never
/// get a copy of with secrets in it). Half a configuration is a start-up error naming what is missing.
struct PushSettings: Sendable, Equatable {
    enum Platform: String, Sendable, Codable, CaseIterable {
        case ios, android

        var displayName: String { self == .ios ? "iOS" : "Android" }
        var environmentPrefix: String { "FOYER_PUSH_\(rawValue.uppercased())" }
    }

    /// A UPS variant: the registry endpoints take `variantID:secret` as HTTP Basic.
    struct Credentials: Sendable, Equatable {
        let id: String
        let secret: String

        var basicAuthorization: String { "Basic " + Data("\(id):\(secret)".utf8).base64EncodedString() }
    }

    /// Without a trailing slash; UPS's REST API is under `{baseURL}/rest/`.
    let baseURL: String
    let variants: [Platform: Credentials]
    /// `pushApplicationID:masterSecret` for the sender API; nil: Foyer relays registrations but sends nothing.
    let sender: Credentials?
    /// Task changes are sent to the other users' devices.
    let notifyTasks: Bool

    init?(config: FoyerConfig, mobileServices: MobileServices?) throws {
        let file = mobileServices?.push
        let secrets: [Platform: String?] = [.ios: config.pushIOSVariantSecret, .android: config.pushAndroidVariantSecret]
        let ids: [Platform: String?] = [.ios: config.pushIOSVariantID, .android: config.pushAndroidVariantID]
        let anything = config.pushURL != nil || file != nil || ids.values.contains { $0 != nil } || secrets.values.contains { $0 != nil }
            || config.pushApplicationID != nil || config.pushMasterSecret != nil
        guard anything else {
            if config.pushNotifyTasks == true {
                throw StartupError("push: --push-notify-tasks needs a Unified Push Server (--push-url or a push service in --mobile-services)")
            }
            return nil
        }
        guard let url = config.pushURL ?? file?.url else {
            throw StartupError("push: variants or sender credentials are configured but no Unified Push Server: give --push-url (env FOYER_PUSH_URL)")
        }
        guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""), parsed.host != nil else {
            throw StartupError("push: the Unified Push Server URL must be http:// or https:// with a host, got \(url)")
        }
        baseURL = url.hasSuffix("/") ? String(url.dropLast()) : url

        var variants: [Platform: Credentials] = [:]
        for platform in Platform.allCases {
            let id = (ids[platform] ?? nil) ?? file?.variants[platform]?.id
            let secret = (secrets[platform] ?? nil) ?? file?.variants[platform]?.secret
            switch (id.flatMap { $0.isEmpty ? nil : $0 }, secret.flatMap { $0.isEmpty ? nil : $0 }) {
            case (let id?, let secret?):
                variants[platform] = Credentials(id: id, secret: secret)
            case (let id?, nil):
                throw StartupError("push: the \(platform.displayName) variant \(id) has no secret: set \(platform.environmentPrefix)_VARIANT_SECRET")
            case (nil, _?):
                throw StartupError("push: a \(platform.displayName) variant secret is set but no variant id: give --push-\(platform.rawValue)-variant-id (env \(platform.environmentPrefix)_VARIANT_ID)")
            case (nil, nil):
                break
            }
        }
        guard !variants.isEmpty else {
            throw StartupError("push: \(baseURL) is configured without a variant: give --push-ios-variant-id or --push-android-variant-id, each with its secret in the environment")
        }
        self.variants = variants

        switch (config.pushApplicationID.flatMap { $0.isEmpty ? nil : $0 }, config.pushMasterSecret.flatMap { $0.isEmpty ? nil : $0 }) {
        case (let id?, let secret?): sender = Credentials(id: id, secret: secret)
        case (_?, nil): throw StartupError("push: FOYER_PUSH_APPLICATION_ID is set but FOYER_PUSH_MASTER_SECRET is not")
        case (nil, _?): throw StartupError("push: FOYER_PUSH_MASTER_SECRET is set but FOYER_PUSH_APPLICATION_ID is not")
        case (nil, nil): sender = nil
        }
        if config.pushNotifyTasks == true, sender == nil {
            throw StartupError("push: --push-notify-tasks needs the sender's credentials: set FOYER_PUSH_APPLICATION_ID and FOYER_PUSH_MASTER_SECRET")
        }
        notifyTasks = sender != nil && config.pushNotifyTasks != false
    }

    var registryURL: String { baseURL + "/rest/registry/device" }
    var senderURL: String { baseURL + "/rest/sender" }
}
