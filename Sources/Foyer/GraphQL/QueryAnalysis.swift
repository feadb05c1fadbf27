import GraphQL

/// What `/graphql` needs to know about a query before passing it on: the first limit it breaks, the kind of
/// each operation (GET may not run mutations), and whether it asks for the schema. Nil `operations` means the text
/// does not parse: the server that runs it says what is wrong, in its own words.
struct QueryAnalysis: Sendable {
    var violation: String?
    var operations: [(name: String?, type: OperationType)]?
    /// It selects `__schema` or `__type` somewhere (`__typename` is not introspection of the schema).
    var introspects = false
    /// Each operation's top-level fields, through fragments: what its answer reads.
    private var rootFields: [String?: Set<String>] = [:]

    init(query: String) {
        guard let document = try? parse(source: query, noLocation: true) else { return }
        violation = QueryLimits.violation(in: document)
        operations = document.definitions.compactMap { definition in
            (definition as? OperationDefinition).map { ($0.name?.value, $0.operation) }
        }
        let fragments = Dictionary(
            document.definitions.compactMap { ($0 as? FragmentDefinition).map { ($0.name.value, $0.selectionSet) } }, uniquingKeysWith: { first, _ in first }
        )
        for case let operation as OperationDefinition in document.definitions where rootFields[operation.name?.value] == nil {
            var visited = Set<String>()
            rootFields[operation.name?.value] = Self.fields(of: operation.selectionSet, fragments: fragments, visited: &visited)
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

    private static func fields(of selectionSet: SelectionSet, fragments: [String: SelectionSet], visited: inout Set<String>) -> Set<String> {
        var names = Set<String>()
        for selection in selectionSet.selections {
            switch selection {
            case let field as Field:
                names.insert(field.name.value)
            case let inline as InlineFragment:
                names.formUnion(fields(of: inline.selectionSet, fragments: fragments, visited: &visited))
            case let spread as FragmentSpread:
                guard visited.insert(spread.name.value).inserted, let fragment = fragments[spread.name.value] else { continue }
                names.formUnion(fields(of: fragment, fragments: fragments, visited: &visited))
            default:
                continue
            }
        }
        return names
    }

    /// The operation a request runs: the one named, or the first.
    func operationType(named name: String?) -> OperationType? {
        guard let operations else { return nil }
        if let name { return operations.first { $0.name == name }?.type }
        return operations.first?.type
    }

    /// What the proxy may do with the operation a request runs.
    func kind(named name: String?) -> GraphQLOperationKind {
        switch operationType(named: name) {
        case .query:
            let fields = rootFields[name ?? operations?.first?.name]
            // Only the schema's own fields are known to read no task; any other field might.
            let schemaOnly = fields.map { !$0.isEmpty && $0.isSubset(of: Self.schemaFields) } ?? false
            return .query(readsTasks: !schemaOnly)
        case .mutation: return .mutation
        case .subscription, nil: return .other
        }
    }

    private static let schemaFields: Set<String> = ["__schema", "__type", "__typename"]
}

/// What the proxy may do with an operation before it runs.
enum GraphQLOperationKind: Sendable, Equatable {
    /// Changes nothing: it may be sent twice, shared with identical ones in flight, and kept. `readsTasks`: a
    /// task change may change its answer (anything but the schema's own fields is taken to).
    case query(readsTasks: Bool)
    case mutation
    /// A subscription, or a text that does not parse (the server running it says what is wrong).
    case other

    var isQuery: Bool {
        if case .query = self { true } else { false }
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
        return analyses.value(for: query, orMake: { QueryAnalysis(query: query) }, cost: { _ in length })
    }
}
