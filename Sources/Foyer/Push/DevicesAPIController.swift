import Foundation
import HTTPTypes
import Hummingbird

/// Devices a signed-in app registers for notifications: Foyer registers them at Unified Push with the variant's
/// secret, which so never ships inside the app. `201` when UPS took it, `202` when it waits in the outbox.
struct DevicesAPIController {
    static let maximumTokenLength = 4096
    static let maximumTextLength = 100
    static let maximumCategories = 50

    /// Nil when no Unified Push Server is configured: every route then says so.
    let relay: PushRelay?

    func addRoutes(to router: FoyerRouter) {
        let router = router.group(context: SignedInContext.self)
        router.post("/api/v1/devices", use: register)
        // Hotwire Native apps in the Jumpstart style send {token, platform} here.
        router.post("/api/v1/notification_tokens", use: register)
        router.get("/api/v1/devices", use: index)
        router.get("/api/v1/devices/{token}", use: show)
        router.delete("/api/v1/devices/{token}", use: unregister)
    }

    struct DeviceJSON: Encodable {
        let deviceToken: String
        let deviceType: PushSettings.Platform
        let operatingSystem: String?
        let osVersion: String?
        let categories: [String]
        /// `registered`, or `pending` while it waits in the outbox for Unified Push.
        let state: PushDevice.State
        let createdAt: Date
        let updatedAt: Date

        init(_ device: PushDevice) {
            deviceToken = device.token
            deviceType = device.platform
            operatingSystem = device.operatingSystem
            osVersion = device.osVersion
            categories = device.categoryList
            state = device.state
            createdAt = device.createdAt
            updatedAt = device.updatedAt
        }
    }

    @Sendable func register(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let relay = try configured()
        let registration = try await Self.registration(from: request, platforms: Set(relay.client.settings.variants.keys))
        var (device, operation) = try await relay.devices.register(registration, userId: identity.userId, sessionId: identity.session?.id)
        let status: HTTPResponse.Status
        switch await relay.outcome(of: operation) {
        case .done:
            device = try await relay.devices.device(token: device.token, userId: identity.userId) ?? device
            status = .created
        case .unavailable:
            status = .accepted
        case .refused(let code, let detail):
            throw Self.refusal(code, detail: detail, platform: registration.platform)
        }
        var response = Response.json(DeviceJSON(device), status: status)
        response.headers[.location] = "\(request.baseURL)/api/v1/devices/\(Self.pathSegment(device.token))"
        return response
    }

    @Sendable func index(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        return .json(try await configured().devices.list(userId: identity.userId).map(DeviceJSON.init))
    }

    @Sendable func show(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        guard let device = try await configured().devices.device(token: try Self.token(in: context), userId: identity.userId) else {
            throw Self.notYours
        }
        return .json(DeviceJSON(device))
    }

    @Sendable func unregister(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        let relay = try configured()
        let token = try Self.token(in: context)
        guard let operation = try await relay.devices.unregister(token: token, userId: identity.userId) else { throw Self.notYours }
        switch await relay.outcome(of: operation) {
        case .done:
            return Response(status: .noContent)
        case .unavailable(let reason):
            struct Pending: Encodable {
                let deviceToken: String
                let state = "unregistering"
                let message: String
            }
            return .json(Pending(deviceToken: token, message: "\(reason). The device is unregistered as soon as Unified Push takes it."), status: .accepted)
        case .refused(let code, let detail):
            throw Self.refusal(code, detail: detail, platform: nil)
        }
    }

    private func configured() throws -> PushRelay {
        guard let relay else {
            throw AppError(.notImplemented, message: "Push notifications are not configured on this server (see --push-url in the README)")
        }
        return relay
    }

    private static let notYours = AppError(.notFound, message: Phrase("push.errors.no_device"))

    /// UPS's 400 is about the device (its token does not suit the variant): the app's to fix, 422. Anything else it
    /// refuses (401: Foyer's credentials) is the operator's: 502, and the log says more.
    private static func refusal(_ status: Int, detail: String, platform: PushSettings.Platform?) -> any Error {
        if status == 400 {
            let why = detail.isEmpty ? "" : ": \(detail)"
            return ValidationFailed(errors: ["device_token": [Phrase(verbatim: "was refused by Unified Push as a \(platform?.displayName ?? "") device token\(why)")]])
        }
        return AppError(.badGateway, message: "Unified Push refused Foyer's request (\(status)); the server's log says why")
    }

    private static func token(in context: SignedInContext) throws -> String {
        let raw = try context.parameters.require("token")
        return raw.removingPercentEncoding ?? raw
    }

    static func pathSegment(_ token: String) -> String {
        token.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? token
    }

    // MARK: - Reading a registration

    /// `{deviceToken, deviceType, operatingSystem, osVersion, categories, oldDeviceToken}` (UPS's names, or
    /// snake_case), or Jumpstart's `{token, platform}`; flat, or under `device` / `notification_token`.
    static func registration(from request: Request, platforms: Set<PushSettings.Platform>) async throws -> DeviceRegistration {
        var request = request
        let buffer = try await request.collectBody(limitedTo: 64 << 10)
        let object: [String: Any]
        do {
            guard let parsed = try JSONSerialization.jsonObject(with: Data(buffer: buffer)) as? [String: Any] else {
                throw AppError(.badRequest, message: Self.expectedShape)
            }
            object = parsed
        } catch let error as AppError {
            throw error
        } catch {
            throw AppError(.badRequest, message: Phrase("errors.not_json", ["expected": Self.expectedShape]))
        }
        let fields = object["device"] as? [String: Any] ?? object["notification_token"] as? [String: Any] ?? object
        var errors: [String: [Phrase]] = [:]

        /// The first of `names` present, as a string; wrong types and lengths are noted under the name used.
        func text(_ names: [String], maximum: Int = maximumTextLength) -> (name: String, value: String)? {
            guard let name = names.first(where: { fields[$0] != nil && !(fields[$0] is NSNull) }) else { return nil }
            guard let value = fields[name] as? String else {
                errors[name, default: []].append(Phrase("errors.not_string"))
                return nil
            }
            // Counted as JSON Schema's maxLength counts (code points), not as Swift's characters: "ó" written as "o" and
            // a combining accent is one Character but two code points.
            if value.unicodeScalars.count > maximum { errors[name, default: []].append(Phrase("errors.too_long", count: maximum)) }
            return (name, value)
        }
        func token(_ names: [String], required: Bool) -> String? {
            guard let (name, value) = text(names, maximum: maximumTokenLength) else {
                if required { errors[names[0], default: []].append(Phrase("errors.blank")) }
                return nil
            }
            if value.isEmpty {
                errors[name, default: []].append(Phrase("errors.blank"))
            } else if !value.unicodeScalars.allSatisfy(isTokenCharacter) {
                errors[name, default: []].append(Phrase(verbatim: "may only hold letters, digits and . _ : -"))
            }
            return value
        }

        let deviceToken = token(["deviceToken", "device_token", "token"], required: true)
        let oldToken = token(["oldDeviceToken", "old_device_token"], required: false)
        var platform: PushSettings.Platform?
        if let (name, value) = text(["deviceType", "device_type", "platform"]) {
            if let known = PushSettings.Platform(rawValue: value.lowercased()) {
                if platforms.contains(known) {
                    platform = known
                } else {
                    errors[name, default: []].append(Phrase(verbatim: "is \(known.rawValue), but this server has no \(known.displayName) variant configured"))
                }
            } else {
                errors[name, default: []].append(Phrase("errors.one_of", ["choices": "ios, android"]))
            }
        } else if errors["deviceType"] == nil {
            errors["deviceType", default: []].append(Phrase("errors.one_of", ["choices": "ios, android"]))
        }
        let operatingSystem = text(["operatingSystem", "operating_system"])?.value
        let osVersion = text(["osVersion", "os_version"])?.value
        var categories: [String] = []
        if let value = fields["categories"], !(value is NSNull) {
            if let list = value as? [String], list.count <= maximumCategories, list.allSatisfy({ !$0.isEmpty && $0.unicodeScalars.count <= maximumTextLength }) {
                categories = list
            } else {
                errors["categories", default: []].append(Phrase(verbatim: "must be a list of at most \(maximumCategories) names of 1 to \(maximumTextLength) characters"))
            }
        }
        guard errors.isEmpty, let deviceToken, let platform else { throw ValidationFailed(errors: errors) }
        return DeviceRegistration(
            token: deviceToken, platform: platform, operatingSystem: operatingSystem, osVersion: osVersion,
            categories: categories, oldToken: oldToken
        )
    }

    private static let expectedShape = #"send a JSON object like {"deviceToken": "…", "deviceType": "ios", "operatingSystem": "iOS", "osVersion": "17.0"}"#

    /// APNs tokens are hex, FCM tokens letters, digits, `-`, `_` and `:`; nothing else belongs in a URL path segment.
    private static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", "-", "_", ".", ":": true
        default: false
        }
    }
}
