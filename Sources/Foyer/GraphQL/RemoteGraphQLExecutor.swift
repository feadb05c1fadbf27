import AsyncHTTPClient
import Foundation
import GraphQL
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Forwards to the configured GraphQL server with the caller's upstream credentials, over a pooled client.
struct RemoteGraphQLExecutor: GraphQLExecutor {
    static let timeout: TimeAmount = .seconds(30)
    static let maximumReplySize = 16 << 20

    let url: String
    /// Where subscriptions go; nil when the upstream has none.
    let webSocketURL: String?
    let client: HTTPClient
    let logger: Logger
    let health = UpstreamHealth()

    /// After the upstream fails to answer, calls fail at once for `cooldown` instead of each waiting out the
    /// connection retries (seconds). Then the next call tries again, so service resumes by itself.
    final class UpstreamHealth: Sendable {
        static let cooldown: TimeInterval = 3
        private let failedAt = NIOLockedValueBox<Date?>(nil)

        /// Throws "unreachable" while the last failure is younger than `cooldown`.
        func failFast(now: Date = Date()) throws {
            let ago = failedAt.withLockedValue { failedAt -> TimeInterval? in
                guard let failedAt, now.timeIntervalSince(failedAt) < Self.cooldown else { return nil }
                return now.timeIntervalSince(failedAt)
            }
            if let ago {
                throw GraphQLUpstreamError.unreachable("it did not answer \(Int(ago.rounded())) s ago; trying again in a moment")
            }
        }

        func recordFailure() { failedAt.withLockedValue { $0 = Date() } }
        func recordSuccess() { failedAt.withLockedValue { $0 = nil } }
    }

    /// Redirects are not followed: a 302 from the upstream means "log in again", not "look over there".
    /// The default pool of 8 connections per host is too few for a busy BFF.
    static func makeClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5)))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        try health.failFast()
        var outbound = HTTPClientRequest(url: url)
        outbound.method = .POST
        outbound.headers.add(name: "Content-Type", value: "application/json")
        outbound.headers.add(name: "Accept", value: "application/json")
        if let token = credentials.bearerToken {
            outbound.headers.add(name: "Authorization", value: "Bearer \(token)")
        }
        outbound.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(request)))

        let response: HTTPClientResponse
        do {
            response = try await client.execute(outbound, timeout: Self.timeout)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            health.recordFailure()
            throw GraphQLUpstreamError.timedOut
        } catch {
            health.recordFailure()
            throw GraphQLUpstreamError.unreachable(String(describing: error))
        }
        health.recordSuccess()
        // A redirect is the upstream sending us to its login page: our credentials are no good there any more.
        if (300..<400).contains(response.status.code) { throw GraphQLUpstreamError.sessionExpired }
        if response.status == .forbidden || response.status == .unauthorized { throw GraphQLUpstreamError.sessionExpired }
        let body: ByteBuffer
        do {
            body = try await response.body.collect(upTo: Self.maximumReplySize)
        } catch {
            throw GraphQLUpstreamError.invalidReply("the reply body could not be read (\(error))")
        }
        let contentType = response.headers.first(name: "Content-Type")?.lowercased() ?? ""
        guard contentType.contains("json") else {
            throw GraphQLUpstreamError.invalidReply("status \(response.status.code), content type \(contentType.isEmpty ? "none" : contentType)")
        }
        return GraphQLReply(status: HTTPResponse.Status(code: Int(response.status.code)), body: body)
    }
}
