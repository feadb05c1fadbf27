import Foundation
import FoyerServer

/// The operations an app was built with (`--graphql-trusted-documents`), from the manifest Apollo's tooling writes
/// (`persisted-query-manifest.json`: `{"format": "apollo-persisted-query-manifest", "version": 1, "operations":
/// [{"id", "name", "type", "body"}]}`). When set, only these run at `/graphql`: by id (the hash a client sends) or
/// by body (the exact text), so arbitrary queries never reach the upstream.
struct TrustedDocuments: Sendable {
    private let bodiesByID: [String: String]
    private let bodies: Set<String>

    init(operations: [(id: String, body: String)]) {
        bodiesByID = Dictionary(operations.map { ($0.id, $0.body) }, uniquingKeysWith: { first, _ in first })
        bodies = Set(operations.map(\.body))
    }

    func document(id: String) -> String? { bodiesByID[id] }

    func contains(body: String) -> Bool { bodies.contains(body) }

    static func load(path: String) throws -> TrustedDocuments {
        struct Manifest: Decodable {
            struct Operation: Decodable {
                let id: String
                let name: String?
                let type: String?
                let body: String
            }
            let format: String?
            let version: Int?
            let operations: [Operation]
        }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw StartupError("--graphql-trusted-documents: cannot read \(path): \(error.localizedDescription)")
        }
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: data)
        } catch {
            throw StartupError(
                "--graphql-trusted-documents: \(path) is not a persisted query manifest ({\"format\": \"apollo-persisted-query-manifest\", \"version\": 1, \"operations\": [{\"id\", \"name\", \"type\", \"body\"}]}): \(error)"
            )
        }
        if let format = manifest.format, format != "apollo-persisted-query-manifest" {
            throw StartupError("--graphql-trusted-documents: \(path) has format \"\(format)\"; Foyer reads apollo-persisted-query-manifest")
        }
        if let version = manifest.version, version != 1 {
            throw StartupError("--graphql-trusted-documents: \(path) is version \(version) of the manifest format; Foyer reads version 1")
        }
        return TrustedDocuments(operations: manifest.operations.map { ($0.id, $0.body) })
    }
}
