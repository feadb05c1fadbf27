import GraphQL

/// What `/graphql` needs to know about a query before passing it on: the first limit it breaks, the kind of
/// each operation (GET may not run mutations), and whether it asks for the schema. Nil `operations` means the text
/// does not parse: the server that runs it says what is wrong, in its own words.
struct QueryAnalysis: Sendable {
    var violation: String?
    var operations: [(name: String?, type: OperationType)]?
    /// It selects `__schema` or `__type` somewhere (`__typename` is not introspection of the schema).
    var introspects = false

    init(query: String) {
        guard let document = try? parse(source: query, noLocation: true) else { return }
        violation = QueryLimits.violation(in: document)
        operations = document.definitions.compactMap { definition in
            (definition as? OperationDefinition).map { ($0.name?.value, $0.operation) }
        }
        introspects = document.definitions.contains { definition in
            switch definition {
            case let operation as OperationDefinition: Self.introspects(operation.selectionSet)
            case let fragment as FragmentDefinition: Self.introspects(fragment.selectionSet)
            default: false
            }
        }
    }

    private static func introspects(_ selectionSet: SelectionSet) -> Bool {
        selectionSet.selections.contains { selection in
            switch selection {
            case let field as Field:
                field.name.value == "__schema" || field.name.value == "__type" || field.selectionSet.map(introspects) == true
            case let inline as InlineFragment:
                introspects(inline.selectionSet)
            default:
                false
            }
        }
    }

    /// The operation a request runs: the one named, or the first.
    func operationType(named name: String?) -> OperationType? {
        guard let operations else { return nil }
        if let name { return operations.first { $0.name == name }?.type }
        return operations.first?.type
    }
}

/// Analyses by query text. Apps send the same few documents over and over (as persisted queries do), and parsing
/// one costs more than forwarding it, so each text is parsed once. Bounded by the characters held.
final class QueryAnalysisCache: Sendable {
    static let maximumCharacters = 4 << 20
    /// Longer texts are analysed every time: they are rare, and would crowd out the common ones.
    static let maximumQueryCharacters = 16 << 10

    private let analyses = StartOverCache<String, QueryAnalysis>(maximumCost: maximumCharacters)

    func analysis(of query: String) -> QueryAnalysis {
        let length = query.utf8.count
        guard length <= Self.maximumQueryCharacters else { return QueryAnalysis(query: query) }
        if let known = analyses.value(for: query) { return known }
        let analysis = QueryAnalysis(query: query)
        analyses.keep(analysis, for: query, cost: length)
        return analysis
    }
}
