import Foundation
import GraphQL
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Forwards to the configured GraphQL server with the caller's upstream credentials, over kept-alive connections.
struct RemoteGraphQLExecutor: GraphQLExecutor {
    static let timeout: TimeAmount = .seconds(30)
    static let maximumReplySize = 16 << 20

    /// Where subscriptions go; nil when the upstream has none.
    let webSocketURL: String?
    let connections: UpstreamConnections
    let metrics: FoyerMetrics
    let health = UpstreamHealth()
    /// The task pages' few documents, judged once: a query may be sent again on a fresh connection.
    let analyses = QueryAnalysisCache()

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

    func execute(_ request: GraphQLRequest, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        let kind = analyses.analysis(of: request.query).kind(named: request.operationName)
        return try await execute(encoded: ByteBuffer(bytes: try JSONEncoder().encode(request)), kind: kind, credentials: credentials)
    }

    func execute(encoded request: ByteBuffer, kind: GraphQLOperationKind, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        let start = ContinuousClock.now
        do {
            let reply = try await forward(request, isQuery: kind.isQuery, credentials: credentials)
            metrics.graphQLUpstreamDuration.record(ContinuousClock.now - start)
            return reply
        } catch let error as GraphQLUpstreamError {
            metrics.graphQLUpstreamDuration.record(ContinuousClock.now - start)
            metrics.upstreamFailure(error.metricsKind)
            throw error
        }
    }

    private func forward(_ request: ByteBuffer, isQuery: Bool, credentials: UpstreamCredentials) async throws -> GraphQLReply {
        try health.failFast()
        var headers = HTTPHeaders([("Content-Type", "application/json"), ("Accept", "application/json")])
        if let token = credentials.bearerToken { headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let trace = RequestTrace.current { headers.add(contentsOf: trace.headerPairs) }
        let answer: UpstreamConnections.Answer
        do {
            answer = try await connections.post(
                headers: headers, body: request, idempotent: isQuery, timeout: Self.timeout, maximumAnswerSize: Self.maximumReplySize
            )
        } catch UpstreamConnections.Failure.answerTooLarge {
            throw GraphQLUpstreamError.invalidReply("the reply is larger than \(Self.maximumReplySize >> 20) MiB")
        } catch UpstreamConnections.Failure.timedOut, ChannelError.connectTimeout {
            health.recordFailure()
            throw GraphQLUpstreamError.timedOut
        } catch {
            health.recordFailure()
            throw GraphQLUpstreamError.unreachable(String(describing: error))
        }
        health.recordSuccess()
        // Redirects are not followed: a 302 from the upstream means "log in again", not "look over there".
        if (300..<400).contains(answer.head.status.code) { throw GraphQLUpstreamError.sessionExpired }
        if answer.head.status == .forbidden || answer.head.status == .unauthorized { throw GraphQLUpstreamError.sessionExpired }
        let contentType = answer.head.headers.first(name: "Content-Type") ?? ""
        guard Self.namesJSON(contentType) else {
            throw GraphQLUpstreamError.invalidReply("status \(answer.head.status.code), content type \(contentType.isEmpty ? "none" : contentType)")
        }
        return GraphQLReply(status: HTTPResponse.Status(code: Int(answer.head.status.code)), body: answer.body)
    }

    /// Whether a content type says JSON (`application/json`, `application/graphql-response+json`…), in any case.
    /// Bytes compared, not Foundation's `contains`, which was 1 % of a proxied request.
    static func namesJSON(_ contentType: String) -> Bool {
        let bytes = Array(contentType.utf8), json = Array("json".utf8)
        guard bytes.count >= json.count else { return false }
        return (0...(bytes.count - json.count)).contains { start in json.indices.allSatisfy { bytes[start + $0] | 0x20 == json[$0] } }
    }
}
