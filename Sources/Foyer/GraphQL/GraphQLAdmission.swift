import GraphQL
import HTTPTypes
import Hummingbird

/// Whether an operation a client sent may run at `/graphql` (over HTTP or the websocket), and with which document:
/// Apollo's automatic persisted queries (a hash alone, or a hash with the document that registers it), the trusted
/// documents when configured, the introspection switch, and the query limits. Everything it refuses is a
/// `GraphQLRefusal`, worded and coded as Apollo's servers word and code theirs.
struct GraphQLAdmission: Sendable {
    let persisted: PersistedDocuments
    let trusted: TrustedDocuments?
    let allowsIntrospection: Bool
    let metrics: FoyerMetrics
    let analyses = QueryAnalysisCache()

    /// `extensions.persistedQuery` of a request.
    struct PersistedQuery: Decodable, Sendable {
        let version: Int
        let sha256Hash: String
    }

    /// An operation cleared to run: its document and what kind of operation it is (nil: the text does not parse,
    /// and the server running it says so).
    struct Admitted: Sendable {
        let query: String
        let type: OperationType?
        let kind: GraphQLOperationKind
    }

    /// Clears the operation, or throws the GraphQLRefusal the client gets.
    func admit(query: String?, operationName: String?, persistedQuery: PersistedQuery?, allowMutations: Bool) async throws -> Admitted {
        let query = try await document(query: query, persistedQuery: persistedQuery)
        let analysis = analyses.analysis(of: query)
        if let violation = analysis.violation {
            metrics.graphQLRefusal(.tooComplex)
            throw GraphQLRefusal(.badRequest, violation, code: "QUERY_TOO_COMPLEX")
        }
        if !allowsIntrospection, analysis.introspects {
            metrics.graphQLRefusal(.introspection)
            throw GraphQLRefusal(.badRequest, "Introspection is turned off on this server: __schema and __type cannot be queried", code: "INTROSPECTION_DISABLED")
        }
        let type = analysis.operationType(named: operationName)
        if !allowMutations, type == .mutation {
            var refusal = GraphQLRefusal(.methodNotAllowed, "Mutations must be sent with POST", code: "METHOD_NOT_ALLOWED")
            refusal.headers[.allow] = "POST"
            throw refusal
        }
        return Admitted(query: query, type: type, kind: analysis.kind(named: operationName))
    }

    /// The document an operation runs: the one it carries, or the one its hash (or manifest id) names.
    private func document(query: String?, persistedQuery: PersistedQuery?) async throws -> String {
        if let persistedQuery, persistedQuery.version != 1 {
            throw GraphQLRefusal(
                .badRequest, "Unsupported persisted query version \(persistedQuery.version); this server speaks version 1",
                code: "PERSISTED_QUERY_VERSION_NOT_SUPPORTED"
            )
        }
        if let trusted {
            // Only the manifest's documents run, and nothing new is registered (Apollo Router turns APQ off too).
            if let query {
                guard trusted.contains(body: query) else {
                    metrics.graphQLRefusal(.untrusted)
                    throw GraphQLRefusal(.badRequest, "This server runs only its trusted documents, and this operation is not one of them", code: "QUERY_NOT_IN_SAFELIST")
                }
                return query
            }
            guard let id = persistedQuery?.sha256Hash else { throw Self.noQuery }
            guard let document = trusted.document(id: id) ?? trusted.document(id: id.lowercased()) else {
                metrics.graphQLRefusal(.untrusted)
                throw GraphQLRefusal(.badRequest, "Persisted query '\(id)' not found in the persisted query list", code: "PERSISTED_QUERY_NOT_IN_LIST")
            }
            return document
        }
        guard let persistedQuery else {
            guard let query else { throw Self.noQuery }
            return query
        }
        guard PersistedDocuments.isHash(persistedQuery.sha256Hash) else {
            throw GraphQLRefusal(.badRequest, "extensions.persistedQuery.sha256Hash must be 64 hex digits, the SHA-256 of the query", code: "BAD_REQUEST")
        }
        let hash = persistedQuery.sha256Hash.lowercased()
        if let query {
            guard PersistedDocuments.hash(of: query) == hash else {
                metrics.graphQLRefusal(.hashMismatch)
                throw GraphQLRefusal(.badRequest, "provided sha does not match query", code: "PERSISTED_QUERY_HASH_MISMATCH")
            }
            try await persisted.register(query, hash: hash)
            metrics.persistedQuery(.registered)
            return query
        }
        guard let document = try await persisted.document(hash: hash) else {
            // Apollo clients answer this one by sending the query with its hash: a 200, as Apollo Server answers it.
            metrics.persistedQuery(.miss)
            var refusal = GraphQLRefusal(.ok, "PersistedQueryNotFound", code: "PERSISTED_QUERY_NOT_FOUND")
            refusal.headers[.cacheControl] = "private, no-cache, must-revalidate"
            throw refusal
        }
        metrics.persistedQuery(.hit)
        return document
    }

    static let noQuery = GraphQLRefusal(
        .badRequest, "The body must be JSON like {\"query\": \"…\", \"variables\": {…}}, or name a persisted query in extensions.persistedQuery",
        code: "BAD_REQUEST"
    )
}

/// An operation Foyer will not run, as GraphQL clients expect it: `{"errors": [{"message", "extensions": {"code"}}]}`
/// with a status (and, in a batch, that object in the operation's place).
struct GraphQLRefusal: Error, Sendable {
    var status: HTTPResponse.Status
    var message: String
    var code: String
    var headers: HTTPFields = [:]

    init(_ status: HTTPResponse.Status, _ message: String, code: String) {
        self.status = status
        self.message = message
        self.code = code
    }

    init(_ refusal: IdempotencyRefusal) {
        self.init(refusal.status, refusal.message, code: refusal.code)
        headers = refusal.headers
    }

    var body: ByteBuffer {
        struct Body: Encodable {
            struct Error: Encodable {
                let message: String
                let extensions: [String: String]
            }
            let errors: [Error]
        }
        return Response.encodeJSON(Body(errors: [.init(message: message, extensions: ["code": code])]))
    }

    var response: Response {
        var response = Response.json(encoded: body, status: status)
        response.headers.append(contentsOf: headers)
        return response
    }
}
