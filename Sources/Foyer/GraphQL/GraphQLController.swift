import Foundation
import FoyerServer
import GraphQL
import HTTPTypes
import Hummingbird

/// `/graphql` for signed-in users: POST (any operation, or a batch of them) and GET (queries only), run by the
/// configured executor once `GraphQLAdmission` has cleared them. Replies and their errors pass through unchanged;
/// our own refusals are GraphQL-shaped too.
struct GraphQLController {
    static let maximumBodySize = 1 << 20
    let executor: any GraphQLExecutor
    /// The upstream credentials of a caller (for now a configured static token, or none).
    let credentials: UpstreamCredentialSource
    let admission: GraphQLAdmission
    /// Operations one batch may hold.
    let batchLimit: Int
    /// Each caller's quota of operations; nil: none.
    let rateLimit: CallerRateLimit?
    /// Mutations sent with an `Idempotency-Key` answer once per key.
    let idempotency: IdempotencyKeys
    /// Kept query answers, looked up by a POST's bytes before anything else is read of it.
    let answers: QueryAnswers

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
            var refusal = GraphQLRefusal(.contentTooLarge, "The request body is larger than 1 MiB", code: "PAYLOAD_TOO_LARGE")
            // The rest of the body is not read: the connection closes after the answer.
            refusal.headers[.connection] = "close"
            return refusal.response
        }
        let idempotent: IdempotentRequest?
        do {
            idempotent = try IdempotencyKeys.key(in: request).map {
                IdempotentRequest(keys: idempotency, key: $0, caller: identity.userId, fingerprint: IdempotencyKeys.fingerprint(request, body: body))
            }
        } catch let refusal as IdempotencyRefusal {
            return GraphQLRefusal(refusal).response
        }
        if body.readableBytesView.first(where: { !Self.isJSONWhitespace($0) }) == UInt8(ascii: "[") {
            return try await batch(body, identity: identity, idempotent: idempotent)
        }
        return try await withinQuota(of: identity) { try await operation(body, identity: identity, idempotent: idempotent) }
    }

    /// One operation POSTed.
    private func operation(_ body: ByteBuffer, identity: Identity, idempotent: IdempotentRequest?) async throws -> Response {
        let credentials = try await credentials(identity)
        // A query asked before in these very bytes, whose answer is still true: decoding and admitting it again
        // would only say what they said then (the rules do not change while the server runs).
        if let kept = answers.kept(body, credentials: credentials) {
            return Response.json(encoded: kept.body, status: kept.status)
        }
        // Only what admission needs is read; a plain request goes on as the client wrote it.
        let envelope: Envelope
        if let scanned = EnvelopeScan.envelope(of: body) {
            envelope = scanned
        } else {
            do {
                envelope = try Self.decoder.decode(Envelope.self, from: body)
            } catch {
                return GraphQLAdmission.noQuery.response
            }
        }
        do {
            let admitted = try await admission.admit(
                query: envelope.query, operationName: envelope.operationName, persistedQuery: envelope.persistedQuery, allowMutations: true
            )
            return try await IdempotentRequest.respond(idempotent, if: admitted.kind == .mutation) {
                guard envelope.persistedQuery != nil else {
                    return try await answer { try await executor.execute(encoded: body, kind: admitted.kind, credentials: credentials) }
                }
                // The upstream gets the document itself, whether or not it speaks APQ.
                let operation = try Self.decoder.decode(Operation.self, from: body)
                return try await answer { try await executor.execute(operation.request(running: admitted), credentials: credentials) }
            }
        } catch let refusal as GraphQLRefusal {
            return refusal.response
        }
    }

    @Sendable func get(request: Request, context: FoyerRequestContext) async throws -> Response {
        // A websocket upgrade lands here only when it offered no subprotocol we speak.
        if request.headers.value(.upgrade)?.lowercased() == "websocket" {
            return GraphQLRefusal(
                .badRequest, "Offer the websocket subprotocol graphql-transport-ws or graphql-ws", code: "UNSUPPORTED_SUBPROTOCOL"
            ).response
        }
        let identity = try context.requireIdentity()
        // Queries change nothing, but a GET may register a persisted document: another site's page gets no say.
        if identity.credential == .cookie, let origin = request.crossSiteOrigin {
            return GraphQLRefusal(.forbidden, "A GraphQL request with this site's cookie came from another site (\(origin))", code: "CROSS_SITE_REQUEST").response
        }
        return try await withinQuota(of: identity) { try await query(request, identity: identity) }
    }

    /// A query sent by GET, in the query string.
    private func query(_ request: Request, identity: Identity) async throws -> Response {
        // Form-encoded, as clients build query strings: `+` is a space (Python's requests sends JSON that way).
        let parameters = FormFields.parse(request.uri.query ?? "")
        let query = parameters["query"].flatMap { $0.isEmpty ? nil : $0 }
        var variables: [String: Map] = [:]
        var persistedQuery: GraphQLAdmission.PersistedQuery?
        do {
            if let raw = parameters["variables"], !raw.isEmpty {
                guard let decoded = try? Self.decoder.decode([String: Map].self, from: Data(raw.utf8)) else {
                    throw GraphQLRefusal(.badRequest, "?variables= must be a JSON object", code: "BAD_REQUEST")
                }
                variables = decoded
            }
            if let raw = parameters["extensions"], !raw.isEmpty {
                guard let extensions = try? Self.decoder.decode(Extensions.self, from: Data(raw.utf8)) else {
                    throw GraphQLRefusal(
                        .badRequest, "?extensions= must be a JSON object like {\"persistedQuery\": {\"version\": 1, \"sha256Hash\": \"…\"}}", code: "BAD_REQUEST"
                    )
                }
                persistedQuery = extensions.persistedQuery
            }
            guard query != nil || persistedQuery != nil else {
                throw GraphQLRefusal(.badRequest, "Give the query in ?query=, or its persisted hash in ?extensions=", code: "BAD_REQUEST")
            }
            let operationName = parameters["operationName"]
            let admitted = try await admission.admit(query: query, operationName: operationName, persistedQuery: persistedQuery, allowMutations: false)
            let request = GraphQLRequest(query: admitted.query, operationName: operationName, variables: variables)
            let credentials = try await credentials(identity)
            return try await answer { try await executor.execute(request, credentials: credentials) }
        } catch let refusal as GraphQLRefusal {
            return refusal.response
        }
    }

    /// A JSON array of operations (Apollo's batch link): each is admitted and run on its own, and the answer is an
    /// array of their results in the same order. Queries between two mutations run together; a mutation runs once
    /// everything before it has finished, and before anything after it starts.
    private func batch(_ body: ByteBuffer, identity: Identity, idempotent: IdempotentRequest?) async throws -> Response {
        let operations: [Operation]
        do {
            operations = try Self.decoder.decode([Operation].self, from: body)
        } catch {
            return GraphQLRefusal(.badRequest, "A batch must be a JSON array of operations like {\"query\": \"…\", \"variables\": {…}}", code: "BAD_REQUEST").response
        }
        guard !operations.isEmpty else {
            return GraphQLRefusal(.badRequest, "The batch holds no operation", code: "BAD_REQUEST").response
        }
        guard operations.count <= batchLimit else {
            return GraphQLRefusal(
                .badRequest, "A batch may hold at most \(batchLimit) operations; this one holds \(operations.count)", code: "BATCH_TOO_LARGE"
            ).response
        }
        // Every operation of a batch counts, or a batch would be a way round the limit.
        return try await withinQuota(of: identity, operations: operations.count) {
            try await run(operations, identity: identity, idempotent: idempotent)
        }
    }

    private func run(_ operations: [Operation], identity: Identity, idempotent: IdempotentRequest?) async throws -> Response {
        var results = [ByteBuffer?](repeating: nil, count: operations.count)
        var admitted: [(index: Int, request: GraphQLRequest, type: OperationType?)] = []
        for (index, operation) in operations.enumerated() {
            do {
                let clearance = try await admission.admit(
                    query: operation.query, operationName: operation.operationName, persistedQuery: operation.persistedQuery, allowMutations: true
                )
                admitted.append((index, operation.request(running: clearance), clearance.type))
            } catch let refusal as GraphQLRefusal {
                results[index] = refusal.body
            }
        }
        let credentials = try await credentials(identity)
        // A batch that changes something answers once per key, as a whole.
        return try await IdempotentRequest.respond(idempotent, if: admitted.contains { $0.type == .mutation }) {
            await execute(admitted, into: results, credentials: credentials)
        }
    }

    private func execute(
        _ admitted: [(index: Int, request: GraphQLRequest, type: OperationType?)], into refused: [ByteBuffer?], credentials: UpstreamCredentials
    ) async -> Response {
        var results = refused
        let executor = executor
        var next = admitted[...]
        while let first = next.first {
            // A mutation alone; otherwise every operation up to the next mutation, concurrently.
            let group = first.type == .mutation ? next.prefix(1) : next.prefix { $0.type != .mutation }
            next = next.dropFirst(group.count)
            await withTaskGroup(of: (Int, ByteBuffer).self) { tasks in
                for operation in group {
                    tasks.addTask {
                        do {
                            return (operation.index, try await executor.execute(operation.request, credentials: credentials).body)
                        } catch let error as GraphQLUpstreamError {
                            return (operation.index, GraphQLRefusal(upstream: error).body)
                        } catch {
                            return (operation.index, GraphQLRefusal(.internalServerError, "The operation failed: \(error)", code: "INTERNAL_SERVER_ERROR").body)
                        }
                    }
                }
                for await (index, body) in tasks { results[index] = body }
            }
        }
        var joined = ByteBuffer()
        joined.writeInteger(UInt8(ascii: "["))
        for (index, result) in results.enumerated() {
            if index > 0 { joined.writeInteger(UInt8(ascii: ",")) }
            if var result { joined.writeBuffer(&result) }
        }
        joined.writeInteger(UInt8(ascii: "]"))
        return Response.json(encoded: joined)
    }

    /// The answer `respond` gives when the caller has `operations` left in their quota (with the headers that say
    /// what is left), or the refusal.
    private func withinQuota(of identity: Identity, operations: Int = 1, _ respond: () async throws -> Response) async throws -> Response {
        guard let rateLimit else { return try await respond() }
        let quota: CallerRateLimit.Quota
        do {
            quota = try rateLimit.take(operations, caller: identity.userId)
        } catch {
            return error.response
        }
        var response = try await respond()
        rateLimit.label(&response, with: quota)
        return response
    }

    private func answer(_ execute: () async throws -> GraphQLReply) async throws -> Response {
        do {
            let reply = try await execute()
            return Response.json(encoded: reply.body, status: reply.status)
        } catch let error as GraphQLUpstreamError {
            return GraphQLRefusal(upstream: error).response
        }
    }

    static let decoder = JSONDecoder()

    /// A POST's `Idempotency-Key`, for the operations that change something.
    struct IdempotentRequest {
        let keys: IdempotencyKeys
        let key: String
        let caller: Int64
        let fingerprint: String

        /// `run`'s answer, once per key when `applies` (a mutation); refusals of the key as GraphQL errors.
        static func respond(_ request: IdempotentRequest?, if applies: Bool, _ run: () async throws -> Response) async throws -> Response {
            guard let request, applies else { return try await run() }
            do {
                return try await request.keys.respond(key: request.key, caller: request.caller, fingerprint: request.fingerprint, run)
            } catch let refusal as IdempotencyRefusal {
                return GraphQLRefusal(refusal).response
            }
        }
    }

    private static func isJSONWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    /// `extensions` of a request: Foyer reads only `persistedQuery`.
    struct Extensions: Decodable {
        let persistedQuery: GraphQLAdmission.PersistedQuery?
    }

    /// The parts of a POST body admission looks at. `variables`, when given, must be an object (or null), as
    /// GraphQL over HTTP asks; what is in it is the server's business.
    struct Envelope: Decodable {
        let query: String?
        let operationName: String?
        let persistedQuery: GraphQLAdmission.PersistedQuery?

        private enum CodingKeys: String, CodingKey { case query, operationName, variables, extensions }
        private struct AnyKey: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(query: String?, operationName: String?, persistedQuery: GraphQLAdmission.PersistedQuery?) {
            (self.query, self.operationName, self.persistedQuery) = (query, operationName, persistedQuery)
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            query = try container.decodeIfPresent(String.self, forKey: .query)
            operationName = try container.decodeIfPresent(String.self, forKey: .operationName)
            if container.contains(.variables), try !container.decodeNil(forKey: .variables) {
                _ = try container.nestedContainer(keyedBy: AnyKey.self, forKey: .variables)
            }
            persistedQuery = try container.decodeIfPresent(Extensions.self, forKey: .extensions)?.persistedQuery
        }
    }

    /// One operation whole, for requests Foyer passes on in its own words: persisted ones and those of a batch.
    struct Operation: Decodable {
        let query: String?
        let operationName: String?
        let variables: [String: Map]?
        let extensions: Extensions?

        var persistedQuery: GraphQLAdmission.PersistedQuery? { extensions?.persistedQuery }

        func request(running admitted: GraphQLAdmission.Admitted) -> GraphQLRequest {
            GraphQLRequest(query: admitted.query, operationName: operationName, variables: variables ?? [:])
        }
    }
}

extension GraphQLRefusal {
    /// The upstream gave no answer to pass on.
    init(upstream error: GraphQLUpstreamError) {
        self.init(error.status, error.message, code: "UPSTREAM_\(error.status.code)")
        if error.status == .unauthorized { headers[.wwwAuthenticate] = "Bearer" }
    }
}
