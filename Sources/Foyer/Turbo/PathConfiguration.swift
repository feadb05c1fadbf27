import Crypto
import Foundation
import FoyerServer

/// The rules native shells load at launch, built once at start from `path_configuration.json`:
/// shared `settings` and `rules`, plus per-platform `settings` and `rules_before`/`rules_after` under `platforms`.
/// Rules are matched in order and later matches win, so a platform can prepend a catch-all or append overrides.
public struct PathConfiguration: Sendable {
    public enum Platform: String, CaseIterable, Sendable {
        case ios, android
    }

    /// The served document of one platform, with its validator.
    public struct Document: Sendable {
        public let body: Data
        public let etag: String
    }

    public let documents: [Platform: Document]
    /// What the service worker keeps offline, from the shared rules' `offline` properties.
    let offline: OfflineRules

    public init(contentsOf path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StartupError("path configuration: cannot read \(path)")
        }
        try self.init(data: data, source: path)
    }

    public init(data: Data, source: String = "path_configuration.json") throws {
        let root: [String: Any]
        do {
            guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw StartupError("\(source): the top level must be a JSON object")
            }
            root = object
        } catch let error as StartupError {
            throw error
        } catch {
            throw StartupError("\(source): not valid JSON (\(error.localizedDescription))")
        }
        let problem = { (message: String) in StartupError("\(source): \(message)") }
        for key in root.keys where !["settings", "rules", "platforms"].contains(key) {
            throw problem("unknown top-level key \"\(key)\" (expected settings, rules, platforms)")
        }
        let settings = try Self.object(root["settings"] ?? [String: Any](), at: "settings", problem)
        let rules = try Self.rules(root["rules"], at: "rules", problem)
        let platforms = try Self.object(root["platforms"] ?? [String: Any](), at: "platforms", problem)
        offline = try OfflineRules(rules: rules, settings: settings, problem: problem)
        for key in platforms.keys where Platform(rawValue: key) == nil {
            throw problem("platforms.\(key) is not a platform (expected ios, android)")
        }

        var documents: [Platform: Document] = [:]
        for platform in Platform.allCases {
            let at = "platforms.\(platform.rawValue)"
            let override = try Self.object(platforms[platform.rawValue] ?? [String: Any](), at: at, problem)
            for key in override.keys where !["settings", "rules_before", "rules_after"].contains(key) {
                throw problem("unknown key \(at).\(key) (expected settings, rules_before, rules_after)")
            }
            let mergedSettings = settings.merging(
                try Self.object(override["settings"] ?? [String: Any](), at: "\(at).settings", problem)
            ) { _, platformValue in platformValue }
            let mergedRules =
                try Self.rules(override["rules_before"] ?? [Any](), at: "\(at).rules_before", problem) + rules
                + Self.rules(override["rules_after"] ?? [Any](), at: "\(at).rules_after", problem)
            if platform == .android {
                try Self.checkAndroidCatchAll(mergedRules, problem)
            }
            let body = try JSONSerialization.data(
                withJSONObject: ["settings": mergedSettings, "rules": mergedRules],
                options: [.sortedKeys, .withoutEscapingSlashes]
            )
            let digest = SHA256.hash(data: body).prefix(12).hexString
            documents[platform] = Document(body: body, etag: "\"\(digest)\"")
        }
        self.documents = documents
    }

    private static func object(_ value: Any, at path: String, _ problem: (String) -> StartupError) throws -> [String: Any] {
        guard let object = value as? [String: Any] else { throw problem("\(path) must be an object") }
        return object
    }

    private static func rules(_ value: Any?, at path: String, _ problem: (String) -> StartupError) throws -> [[String: Any]] {
        guard let value else { throw problem("\(path) is missing") }
        guard let list = value as? [Any] else { throw problem("\(path) must be an array of rules") }
        return try list.enumerated().map { index, rule in
            let at = "\(path)[\(index)]"
            guard let rule = rule as? [String: Any] else { throw problem("\(at) must be an object") }
            guard let patterns = rule["patterns"] as? [Any], !patterns.isEmpty else {
                throw problem("\(at).patterns must be a non-empty array of regular expressions")
            }
            for (patternIndex, pattern) in patterns.enumerated() {
                guard let pattern = pattern as? String else { throw problem("\(at).patterns[\(patternIndex)] must be a string") }
                do {
                    _ = try NSRegularExpression(pattern: pattern)
                } catch {
                    throw problem("\(at).patterns[\(patternIndex)] \"\(pattern)\" is not a valid regular expression")
                }
            }
            guard rule["properties"] is [String: Any] else { throw problem("\(at).properties must be an object") }
            return rule
        }
    }

    /// Hotwire Native Android resolves a screen for every URL from the rules; without a first catch-all rule
    /// naming a `uri`, the app fails on the first page no other rule matches.
    private static func checkAndroidCatchAll(_ rules: [[String: Any]], _ problem: (String) -> StartupError) throws {
        guard let first = rules.first, let patterns = first["patterns"] as? [String], patterns.contains(".*"),
            let properties = first["properties"] as? [String: Any], properties["uri"] is String
        else {
            throw problem("the android rules must start with a catch-all rule (pattern \".*\") whose properties name a \"uri\"")
        }
    }
}
