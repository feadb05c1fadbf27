import ArgumentParser
import Foundation

/// Who Foyer's passkeys belong to (the relying party), and which apps share them and open Foyer's links.
public struct PasskeySettings: Sendable {
    /// WebAuthn's RP ID: a domain, the public URL's host when nil. Passkeys are bound to it for good: changing it
    /// leaves every passkey made before unusable.
    public var rpID: String?
    /// The name an authenticator shows beside the passkey.
    public var rpName = "Foyer"
    /// `TEAMID.bundle.id` of iOS apps (Universal Links and shared passkeys).
    public var iosAppIDs: [String] = []
    /// The Android app's package name, with the SHA-256 fingerprints of its signing certificates.
    public var androidPackage: String?
    public var androidCertificateFingerprints: [String] = []
    /// The public URL (`--public-url`): the origin ceremonies must come from. nil: the origin the request came to.
    var publicURL: String?
    var trustProxy = false

    public init() {}

    /// `android:apk-key-hash:<base64url of the certificate's SHA-256>`: the origin Android apps sign ceremonies with.
    var androidOrigins: [String] {
        androidCertificateFingerprints.compactMap(Self.fingerprintBytes).map { "android:apk-key-hash:" + Data($0).base64URLEncoded }
    }

    /// `AB:CD:…` (32 bytes, as `keytool` and the Play Console print them) to bytes; nil when it is not that.
    static func fingerprintBytes(_ fingerprint: String) -> [UInt8]? {
        let parts = fingerprint.split(separator: ":")
        guard parts.count == 32 else { return nil }
        let bytes = parts.compactMap { $0.count == 2 ? UInt8($0, radix: 16) : nil }
        return bytes.count == 32 ? bytes : nil
    }

    /// `ABCDE12345.com.example.app`: a ten-character team id, then the bundle id.
    static func isAppID(_ id: String) -> Bool {
        let parts = id.split(separator: ".", maxSplits: 1)
        return parts.count == 2 && parts[0].count == 10 && parts[0].allSatisfy { $0.isASCII && ($0.isUppercase || $0.isNumber) } && !parts[1].isEmpty
    }
}

/// The passkey and app-link flags of `foyer serve`; each has an environment variable, and a flag wins over it.
public struct PasskeyOptions: ParsableArguments {
    @Option(help: "WebAuthn relying party id: the domain passkeys are bound to (default: the host of --public-url, else the host a request came to; env FOYER_WEBAUTHN_RP_ID)")
    var webauthnRpId: String?

    @Option(help: ArgumentHelp("An iOS app (TEAMID.bundle.id) that opens Foyer's links and shares its passkeys; repeat for more (env FOYER_IOS_APP_IDS, comma-separated)"))
    var iosAppId: [String] = []

    @Option(help: "The Android app's package name, for App Links and shared passkeys (env FOYER_ANDROID_PACKAGE)")
    var androidPackage: String?

    @Option(help: ArgumentHelp("SHA-256 fingerprint (AB:CD:…) of a certificate the Android app is signed with; repeat for more (env FOYER_ANDROID_CERTIFICATE_FINGERPRINTS, comma-separated)"))
    var androidCertificateFingerprint: [String] = []

    public init() {}

    public func settings(environment: [String: String]) throws -> PasskeySettings {
        func list(_ name: String) -> [String] {
            (environment[name] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        var settings = PasskeySettings()
        settings.rpID = webauthnRpId ?? environment["FOYER_WEBAUTHN_RP_ID"]
        settings.iosAppIDs = iosAppId.isEmpty ? list("FOYER_IOS_APP_IDS") : iosAppId
        settings.androidPackage = androidPackage ?? environment["FOYER_ANDROID_PACKAGE"]
        settings.androidCertificateFingerprints = androidCertificateFingerprint.isEmpty ? list("FOYER_ANDROID_CERTIFICATE_FINGERPRINTS") : androidCertificateFingerprint
        for id in settings.iosAppIDs where !PasskeySettings.isAppID(id) {
            throw ValidationError("--ios-app-id \(id): expected TEAMID.bundle.id (a ten-character team id, a dot, the bundle id)")
        }
        for fingerprint in settings.androidCertificateFingerprints where PasskeySettings.fingerprintBytes(fingerprint) == nil {
            throw ValidationError("--android-certificate-fingerprint \(fingerprint): expected 32 hex bytes separated by colons (AB:CD:…), as keytool prints SHA256")
        }
        if settings.androidPackage != nil, settings.androidCertificateFingerprints.isEmpty {
            throw ValidationError("--android-package needs --android-certificate-fingerprint: Android trusts an app by its signing certificate")
        }
        if let id = settings.rpID, id.isEmpty || id.contains("/") || id.contains(":") {
            throw ValidationError("--webauthn-rp-id \(id): expected a domain (example.com), no scheme or port")
        }
        return settings
    }
}
