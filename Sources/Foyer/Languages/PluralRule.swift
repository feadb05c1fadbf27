/// A catalog's plural rule: gettext's `Plural-Forms: nplurals=N; plural=EXPRESSION;`, the C expression over `n` that
/// picks the form (`msgstr[i]`). Each catalog states CLDR's rule for its language in it (English `n != 1`, Brazilian
/// Portuguese `n > 1`, so 0 and 1 are "one", Chinese `0`), so a language is added by its file alone.
struct PluralRule: Sendable {
    let count: Int
    private let expression: Node

    /// Parses the header's value; fails saying why.
    init(header: String) throws {
        var count: Int?
        var source: String?
        for part in header.split(separator: ";") {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { continue }
            switch pair[0] {
            case "nplurals": count = Int(pair[1])
            case "plural": source = pair[1]
            default: throw CatalogError("Plural-Forms has an unknown part \(pair[0])")
            }
        }
        guard let count, (1...6).contains(count) else { throw CatalogError("Plural-Forms needs nplurals from 1 to 6") }
        guard let source else { throw CatalogError("Plural-Forms needs plural=…") }
        var parser = Parser(tokens: try Self.tokens(source))
        expression = try parser.parseTernary()
        guard parser.atEnd else { throw CatalogError("Plural-Forms: unexpected \(parser.rest) in \(source)") }
        self.count = count
    }

    /// Which form (`msgstr[index]`) a count takes; a rule that answers outside the forms takes the last.
    func form(for n: Int) -> Int {
        let index = expression.evaluate(abs(n))
        return (0..<count).contains(index) ? index : count - 1
    }

    private indirect enum Node: Sendable {
        case n
        case number(Int)
        case not(Node)
        case binary(String, Node, Node)
        case ternary(Node, Node, Node)

        func evaluate(_ n: Int) -> Int {
            switch self {
            case .n: return n
            case .number(let value): return value
            case .not(let operand): return operand.evaluate(n) == 0 ? 1 : 0
            case .ternary(let condition, let yes, let no): return condition.evaluate(n) != 0 ? yes.evaluate(n) : no.evaluate(n)
            case .binary(let op, let left, let right):
                let a = left.evaluate(n)
                // && and || do not read their right side when the left decides, as in C.
                if op == "&&" { return a != 0 && right.evaluate(n) != 0 ? 1 : 0 }
                if op == "||" { return a != 0 || right.evaluate(n) != 0 ? 1 : 0 }
                let b = right.evaluate(n)
                switch op {
                case "==": return a == b ? 1 : 0
                case "!=": return a != b ? 1 : 0
                case "<": return a < b ? 1 : 0
                case ">": return a > b ? 1 : 0
                case "<=": return a <= b ? 1 : 0
                case ">=": return a >= b ? 1 : 0
                case "%": return b == 0 ? 0 : a % b
                case "+": return a + b
                case "-": return a - b
                case "*": return a * b
                default: return b == 0 ? 0 : a / b
                }
            }
        }
    }

    private static let operators = ["&&", "||", "==", "!=", "<=", ">=", "<", ">", "%", "+", "-", "*", "/", "!", "?", ":", "(", ")"]

    private static func tokens(_ source: String) throws -> [String] {
        var tokens: [String] = []
        var rest = Substring(source)
        while let first = rest.first {
            if first == " " {
                rest = rest.dropFirst()
            } else if first.isNumber {
                let digits = rest.prefix(while: \.isNumber)
                tokens.append(String(digits))
                rest = rest.dropFirst(digits.count)
            } else if first == "n" {
                tokens.append("n")
                rest = rest.dropFirst()
            } else if let op = operators.first(where: { rest.hasPrefix($0) }) {
                tokens.append(op)
                rest = rest.dropFirst(op.count)
            } else {
                throw CatalogError("Plural-Forms: \(first) is not part of a plural expression")
            }
        }
        return tokens
    }

    /// C's precedence, lowest first: ?:, ||, &&, == !=, < > <= >=, + -, * / %, !.
    private struct Parser {
        var tokens: [String]
        var position = 0
        var atEnd: Bool { position == tokens.count }
        var rest: String { tokens[position...].joined(separator: " ") }

        private static let levels: [Set<String>] = [["||"], ["&&"], ["==", "!="], ["<", ">", "<=", ">="], ["+", "-"], ["*", "/", "%"]]

        mutating func parseTernary() throws -> Node {
            let condition = try parseBinary(level: 0)
            guard take("?") else { return condition }
            let yes = try parseTernary()
            guard take(":") else { throw CatalogError("Plural-Forms: a ? without its :") }
            return .ternary(condition, yes, try parseTernary())
        }

        private mutating func parseBinary(level: Int) throws -> Node {
            guard level < Self.levels.count else { return try parseUnary() }
            var left = try parseBinary(level: level + 1)
            while !atEnd, Self.levels[level].contains(tokens[position]) {
                let op = tokens[position]
                position += 1
                left = .binary(op, left, try parseBinary(level: level + 1))
            }
            return left
        }

        private mutating func parseUnary() throws -> Node {
            guard !atEnd else { throw CatalogError("Plural-Forms: the expression ends too soon") }
            let token = tokens[position]
            position += 1
            switch token {
            case "!": return .not(try parseUnary())
            case "n": return .n
            case "(":
                let inner = try parseTernary()
                guard take(")") else { throw CatalogError("Plural-Forms: a ( without its )") }
                return inner
            default:
                guard let value = Int(token) else { throw CatalogError("Plural-Forms: unexpected \(token)") }
                return .number(value)
            }
        }

        private mutating func take(_ token: String) -> Bool {
            guard !atEnd, tokens[position] == token else { return false }
            position += 1
            return true
        }
    }
}
