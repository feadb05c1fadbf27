import Hummingbird

/// `?page=` and `?per_page=` from the query: whole numbers, page from 1, per_page from 1 to the maximum.
struct Paging: Hashable, Sendable {
    static let maximumPerPage = 100
    let page: Int
    let perPage: Int

    /// How many items come before this page.
    var offset: Int { (page - 1) * perPage }

    init(_ request: Request, defaultPerPage: Int = 20) throws {
        // Most lists are asked for without a query: looking the two names up in an empty one still hashed both.
        guard request.uri.query != nil else {
            page = 1
            perPage = defaultPerPage
            return
        }
        let query = request.uri.queryParameters
        page = try Self.number(query["page"], name: "page", default: 1, range: 1...1_000_000)
        perPage = try Self.number(query["per_page"], name: "per_page", default: defaultPerPage, range: 1...Self.maximumPerPage)
    }

    private static func number(_ value: Substring?, name: String, default fallback: Int, range: ClosedRange<Int>) throws -> Int {
        guard let value else { return fallback }
        guard let number = Int(value), range.contains(number) else {
            throw AppError(
                .badRequest, message: Phrase("errors.whole_number_between", ["name": name, "min": "\(range.lowerBound)", "max": "\(range.upperBound)"])
            )
        }
        return number
    }
}
