import Foundation
import HTTPTypes
import OpenAPIRuntime
import OpenAPIURLSession

// Registers an iOS device with Foyer through the client generated from Public/openapi.json, as an app would, then
// reads it back. Usage: RegisterDevice BASE_URL SESSION_TOKEN DEVICE_TOKEN

/// The `X-Session-Token` of a native sign-in, as Bearer.
struct SessionToken: ClientMiddleware {
    let token: String

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return try await next(request, body, baseURL)
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let server = URL(string: arguments[1]) else {
    FileHandle.standardError.write(Data("usage: RegisterDevice BASE_URL SESSION_TOKEN DEVICE_TOKEN\n".utf8))
    exit(2)
}
let client = Client(serverURL: server, transport: URLSessionTransport(), middlewares: [SessionToken(token: arguments[2])])
let registration = Components.Schemas.DeviceRegistration.case1(
    .init(deviceToken: arguments[3], deviceType: "ios", operatingSystem: "iOS", osVersion: "18.1", categories: ["tasks"])
)
switch try await client.registerDevice(body: .json(registration)) {
case .created(let created):
    let device = try created.body.json
    guard device.state == .registered else {
        print("Foyer kept the device as \(device.state.rawValue)")
        exit(1)
    }
case let other:
    print("not registered: \(other)")
    exit(1)
}
switch try await client.getDevice(path: .init(token: arguments[3])) {
case .ok(let found):
    let device = try found.body.json
    print("registered \(device.device_token) (\(device.device_type.rawValue) \(device.os_version ?? "?"))")
case let other:
    print("registered, but not found again: \(other)")
    exit(1)
}
