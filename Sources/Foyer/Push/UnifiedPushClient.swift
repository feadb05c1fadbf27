import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// Foyer's calls to a Unified Push Server: register and unregister a device (as the platform's variant), send a
/// message (as the push application). Every answer is sorted into done, refused for good, or worth trying again.
struct UnifiedPushClient: Sendable {
    static let timeout: TimeAmount = .seconds(10)

    enum Answer: Sendable, Equatable, Codable {
        case done
        /// UPS will not take it as it is (400: the token or body is wrong; 401: our credentials are): final.
        case refused(status: Int, detail: String)
        /// Not reachable, timed out, 5xx, 429: try again later.
        case unavailable(String)
    }

    let settings: PushSettings
    let http: HTTPClient

    /// AsyncHTTPClient keeps retrying a refused connection until the connect timeout: that timeout is how long an
    /// app waits for its 202 while UPS is down, so it is short (UPS is normally a LAN hop away).
    static func makeHTTPClient() -> HTTPClient {
        HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: .init(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(2)))
        )
    }

    /// `x-ag-old-token` tells UPS the device's previous token, which it drops.
    func register(_ body: Data, platform: PushSettings.Platform, oldToken: String?) async -> Answer {
        guard let variant = settings.variants[platform] else { return .refused(status: 0, detail: "no \(platform.displayName) variant is configured") }
        var headers = [("Authorization", variant.basicAuthorization)]
        if let oldToken { headers.append(("x-ag-old-token", oldToken)) }
        return await call(.POST, settings.registryURL, headers: headers, body: body)
    }

    /// UPS's 404 (it does not know the token) means the same as 204 here: the device is not registered.
    func unregister(token: String, platform: PushSettings.Platform) async -> Answer {
        guard let variant = settings.variants[platform] else { return .refused(status: 0, detail: "no \(platform.displayName) variant is configured") }
        let path = token.addingPercentEncoding(withAllowedCharacters: Self.unreserved) ?? token
        let answer = await call(.DELETE, settings.registryURL + "/" + path, headers: [("Authorization", variant.basicAuthorization)], body: nil)
        if case .refused(404, _) = answer { return .done }
        return answer
    }

    func send(_ body: Data) async -> Answer {
        guard let sender = settings.sender else { return .refused(status: 0, detail: "no push application credentials are configured") }
        return await call(.POST, settings.senderURL, headers: [("Authorization", sender.basicAuthorization)], body: body)
    }

    private func call(_ method: HTTPMethod, _ url: String, headers: [(String, String)], body: Data?) async -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(contentsOf: headers)
        if let trace = RequestTrace.current { request.headers.add(contentsOf: trace.headerPairs) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        do {
            let response = try await http.execute(request, timeout: Self.timeout)
            let answer = try await response.body.collect(upTo: 64 << 10)
            let status = Int(response.status.code)
            switch status {
            case 200..<300:
                return .done
            case 408, 429, 500...:
                return .unavailable("Unified Push answered \(status)")
            default:
                return .refused(status: status, detail: String(decoding: answer.readableBytesView.prefix(300), as: UTF8.self))
            }
        } catch {
            return .unavailable("Unified Push cannot be reached: \(error)")
        }
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
