import GraphQL

/// Bounds on what one request may ask, checked before anything runs: a deep or alias-heavy query costs the
/// upstream far more than its few bytes suggest.
enum QueryLimits {
    static let maximumDepth = 15
    static let maximumAliases = 30

    /// The first limit the document breaks, in words for the client; nil when it keeps them all.
    static func violation(in document: Document) -> String? {
        let fragments = Dictionary(
            document.definitions.compactMap { $0 as? FragmentDefinition }.map { ($0.name.value, $0) },
            uniquingKeysWith: { first, _ in first }
        )
        for case let operation as OperationDefinition in document.definitions {
            let depth = self.depth(of: operation.selectionSet, fragments: fragments, visiting: [])
            if depth > maximumDepth {
                return "The query is \(depth) levels deep; at most \(maximumDepth) are allowed"
            }
        }
        let aliases = document.definitions.reduce(0) { count, definition in
            switch definition {
            case let operation as OperationDefinition: count + self.aliases(in: operation.selectionSet)
            case let fragment as FragmentDefinition: count + self.aliases(in: fragment.selectionSet)
            default: count
            }
        }
        if aliases > maximumAliases {
            return "The query uses \(aliases) aliases; at most \(maximumAliases) are allowed"
        }
        return nil
    }

    private static func depth(of selectionSet: SelectionSet, fragments: [String: FragmentDefinition], visiting: Set<String>) -> Int {
        selectionSet.selections.reduce(0) { deepest, selection in
            let depth: Int
            switch selection {
            case let field as Field:
                depth = 1 + (field.selectionSet.map { self.depth(of: $0, fragments: fragments, visiting: visiting) } ?? 0)
            case let inline as InlineFragment:
                depth = self.depth(of: inline.selectionSet, fragments: fragments, visiting: visiting)
            case let spread as FragmentSpread:
                // A fragment that spreads itself is a validation error the server reports; do not loop on it here.
                guard !visiting.contains(spread.name.value), let fragment = fragments[spread.name.value] else { return deepest }
                depth = self.depth(of: fragment.selectionSet, fragments: fragments, visiting: visiting.union([spread.name.value]))
            default:
                depth = 0
            }
            return max(deepest, depth)
        }
    }

    private static func aliases(in selectionSet: SelectionSet) -> Int {
        selectionSet.selections.reduce(0) { count, selection in
            switch selection {
            case let field as Field:
                count + (field.alias == nil ? 0 : 1) + (field.selectionSet.map(aliases) ?? 0)
            case let inline as InlineFragment:
                count + aliases(in: inline.selectionSet)
            default:
                count
            }
        }
    }
}
