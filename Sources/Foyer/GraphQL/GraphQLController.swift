import Foundation
import GraphQL
import HTTPTypes
import Hummingbird

/// `/graphql` for signed-in users: POST (any operation) and GET (queries only), run by the configured executor.
/// Replies and their errors pass through unchanged; our own refusals are GraphQL-shaped too.
struct GraphQLController {
    static let maximumBodySize = 1 << 20
    let executor: any GraphQLExecutor
    /// The upstream credentials of a caller (for now a configured static token, or none).
    let credentials: UpstreamCredentialSource
    let analyses = QueryAnalysisCache()

    func addRoutes(to router: FoyerRouter) {
        router.group(context: SignedInContext.self).post("/graphql", use: post)
        // A websocket upgrade that offered no subprotocol is refused before anyone is asked to sign in.
        router.get("/graphql", use: get)
    }

    @Sendable func post(request: Request, context: SignedInContext) async throws -> Response {
        let identity = context.identity
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(limitedTo: Self.maximumBodySize)
        } catch {
            var refusal = Self.refusal(.contentTooLarge, "The request body is larger than 1 MiB", code: "PAYLOAD_TOO_LARGE")
            // The rest of the body is not read: the connection closes after the answer.
            refusal.headers[.connection] = "close"
            return refusal
        }
        // Only what the limits need is read; the body goes on as the client wrote it.
        let envelope: Envelope
        do {
            envelope = try Self.decoder.decode(Envelope.self, from: body)
        } catch {
            return Self.refusal(.badRequest, "The body must be JSON like {\"query\": \"…\", \"variables\": {…}}", code: "BAD_REQUEST")
        }
        let analysis = analyses.analysis(of: envelope.query)
        if let refusal = Self.refusal(for: analysis, operationName: envelope.operationName, allowMutations: true) {
            return refusal
        }
        let isQuery = analysis.operationType(named: envelope.operationName) == .query
        return try await answer { try await executor.execute(encoded: body, isQuery: isQuery, credentials: try await credentials(identity)) }
    }

    @Sendable func get(request: Request, context: FoyerRequestContext) async throws -> Response {
        // A websocket upgrade lands here only when it offered no subprotocol we speak.
        if request.headers[.upgrade]?.lowercased() == "websocket" {
            return Self.refusal(
                .badRequest, "Offer the websocket subprotocol graphql-transport-ws or graphql-ws", code: "UNSUPPORTED_SUBPROTOCOL"
            )
        }
        let identity = try context.requireIdentity()
        let parameters = request.uri.queryParameters
        guard let query = parameters["query"].map(String.init), !query.isEmpty else {
            return Self.refusal(.badRequest, "Give the query in ?query=", code: "BAD_REQUEST")
        }
        var variables: [String: Map] = [:]
        if let raw = parameters["variables"].map(String.init), !raw.isEmpty {
            do {
                variables = try JSONDecoder().decode([String: Map].self, from: Data(raw.utf8))
            } catch {
                return Self.refusal(.badRequest, "?variables= must be a JSON object", code: "BAD_REQUEST")
            }
        }
        let graphQLRequest = GraphQLRequest(query: query, operationName: parameters["operationName"].map(String.init), variables: variables)
        return try await run(graphQLRequest, allowMutations: false, identity: identity)
    }

    private func run(_ graphQLRequest: GraphQLRequest, allowMutations: Bool, identity: Identity) async throws -> Response {
        let analysis = analyses.analysis(of: graphQLRequest.query)
        if let refusal = Self.refusal(for: analysis, operationName: graphQLRequest.operationName, allowMutations: allowMutations) {
            return refusal
        }
        return try await answer { try await executor.execute(graphQLRequest, credentials: try await credentials(identity)) }
    }

    /// Our answer when the query breaks a limit, or is a mutation sent by GET; nil when it may go on.
    private static func refusal(for analysis: QueryAnalysis, operationName: String?, allowMutations: Bool) -> Response? {
        if let violation = analysis.violation {
            return Self.refusal(.badRequest, violation, code: "QUERY_TOO_COMPLEX")
        }
        if !allowMutations, analysis.operationType(named: operationName) == .mutation {
            var response = Self.refusal(.methodNotAllowed, "Mutations must be sent with POST", code: "METHOD_NOT_ALLOWED")
            response.headers[.allow] = "POST"
            return response
        }
        return nil
    }

    private func answer(_ execute: () async throws -> GraphQLReply) async throws -> Response {
        do {
            let reply = try await execute()
            return Response.json(encoded: reply.body, status: reply.status)
        } catch let error as GraphQLUpstreamError {
            var response = Self.refusal(error.status, error.message, code: "UPSTREAM_\(error.status.code)")
            if error.status == .unauthorized { response.headers[.wwwAuthenticate] = "Bearer" }
            return response
        }
    }

    static let decoder = JSONDecoder()

    /// The parts of a POST body Foyer looks at. `variables`, when given, must be an object (or null), as
    /// GraphQL over HTTP asks; what is in it is the server's business.
    struct Envelope: Decodable {
        let query: String
        let operationName: String?

        private enum CodingKeys: String, CodingKey { case query, operationName, variables }
        private struct AnyKey: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            query = try container.decode(String.self, forKey: .query)
            operationName = try container.decodeIfPresent(String.self, forKey: .operationName)
            if container.contains(.variables), try !container.decodeNil(forKey: .variables) {
                _ = try container.nestedContainer(keyedBy: AnyKey.self, forKey: .variables)
            }
        }
    }

    /// `{"errors": [{"message": …, "extensions": {"code": …}}]}` with a status, as GraphQL clients expect.
    static func refusal(_ status: HTTPResponse.Status, _ message: String, code: String) -> Response {
        struct Body: Encodable {
            struct Error: Encodable {
                let message: String
                let extensions: [String: String]
            }
            let errors: [Error]
        }
        return Response.json(Body(errors: [.init(message: message, extensions: ["code": code])]), status: status)
    }
}
