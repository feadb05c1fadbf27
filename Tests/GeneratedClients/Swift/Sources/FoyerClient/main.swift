import Foundation
import HTTPTypes
import OpenAPIRuntime
import OpenAPIURLSession

// What an app does with the client generated from Public/openapi.json, one command at a time:
//   FoyerClient register-device BASE_URL SESSION_TOKEN DEVICE_TOKEN
//     registers an iOS device, then reads it back.
//   FoyerClient edit-post BASE_URL SESSION_TOKEN POST_ID
//     reads the post's ETag, then writes with If-Match current, stale, `*` and none, printing "<case> <status>
//     version <n>" for each (and the conflicting fields of a refusal).

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

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(1)
}

let arguments = CommandLine.arguments
guard arguments.count == 5, let server = URL(string: arguments[2]) else {
    fail("usage: FoyerClient register-device|edit-post BASE_URL SESSION_TOKEN DEVICE_TOKEN|POST_ID")
}
let client = Client(serverURL: server, transport: URLSessionTransport(), middlewares: [SessionToken(token: arguments[3])])

switch arguments[1] {
case "register-device":
    try await registerDevice(token: arguments[4])
case "edit-post":
    guard let id = Int64(arguments[4]) else { fail("POST_ID must be a number") }
    try await editPost(id: id)
default:
    fail("unknown command \(arguments[1])")
}

func registerDevice(token: String) async throws {
    let registration = Components.Schemas.DeviceRegistration.case1(
        .init(deviceToken: token, deviceType: "ios", operatingSystem: "iOS", osVersion: "18.1", categories: ["tasks"])
    )
    switch try await client.registerDevice(body: .json(registration)) {
    case .created(let created):
        let device = try created.body.json
        guard device.state == .registered else { fail("Foyer kept the device as \(device.state.rawValue)") }
    case let other:
        fail("not registered: \(other)")
    }
    switch try await client.getDevice(path: .init(token: token)) {
    case .ok(let found):
        let device = try found.body.json
        print("registered \(device.device_token) (\(device.device_type.rawValue) \(device.os_version ?? "?"))")
    case let other:
        fail("registered, but not found again: \(other)")
    }
}

/// One write with the If-Match given (nil: none), and what came back.
func write(_ id: Int64, ifMatch: String?, title: String) async throws -> (line: String, etag: String?) {
    let answer = try await client.updatePost(
        path: .init(id: id), headers: .init(If_hyphen_Match: ifMatch), body: .json(.init(title: title))
    )
    switch answer {
    case .ok(let ok):
        return ("200 version \(try ok.body.json.version)", ok.headers.ETag)
    case .preconditionFailed(let refused):
        let conflict = try refused.body.application_problem_plus_json
        return ("412 version \(conflict.post.version) conflicting \(conflict.conflicting_fields.map(\.rawValue).joined(separator: ","))", nil)
    case .preconditionRequired:
        return ("428", nil)
    case let other:
        fail("unexpected answer: \(other)")
    }
}

func editPost(id: Int64) async throws {
    guard case .ok(let read) = try await client.getPost(path: .init(id: id)), let etag = read.headers.ETag else { fail("post \(id) not read") }
    print("read \(etag)")
    let current = try await write(id, ifMatch: etag, title: "Current, from the generated client")
    print("current \(current.line)")
    print("stale \(try await write(id, ifMatch: etag, title: "Stale, from the generated client").line)")
    print("any \(try await write(id, ifMatch: "*", title: "Any, from the generated client").line)")
    print("none \(try await write(id, ifMatch: nil, title: "None, from the generated client").line)")
}
