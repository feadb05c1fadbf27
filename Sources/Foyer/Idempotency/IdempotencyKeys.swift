import Crypto
import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird
import NIOCore

/// `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header, as Stripe defines it): the first answer to an unsafe
/// request for (caller, key) is kept for 24 hours in the store, so every instance sharing it knows the key, and
/// replayed for the same key and the same request. The same key with another request is `422`; a key whose first
/// request is still running is `409`; a key that is empty or over 255 characters is `400`. Keys are the caller's own.
///
/// What is kept is the answer a request ran to: a redirect after a form, a created post's JSON, a GraphQL mutation's
/// result, and a write refused as stale (`409`, `412`): its replay is that judgement, not a second one. An answer that
/// fails for reasons a retry may not meet again (5xx, 408, 429, a `409` with `Retry-After`) or that failed before a
/// route answered (thrown to ErrorMiddleware) releases the key, so the retry runs; so does an answer carrying a
/// credential (a session token or the session cookie): those are never stored.
struct IdempotencyKeys: Sendable {
    static let lifetime: TimeInterval = 24 * 3600
    static let maximumKeyLength = 255
    /// Larger answers are passed on and the key released: unsafe requests' answers are redirects and small JSON.
    static let maximumKeptBody = 1 << 20
    /// A first request that has not answered after this long died with its instance: its key may be taken again.
    static let abandonedAfter: TimeInterval = 120

    let storage: any IdempotencyStorage

    init(store: Store) {
        storage = store.choose(sqlite: SQLiteIdempotencyStorage.init, postgres: PostgresIdempotencyStorage.init)
    }

    /// The header's key, or nil when there is none; throws the `400` a malformed one gets.
    static func key(in request: Request) throws -> String? {
        guard let key = request.headers.value(.idempotencyKey) else { return nil }
        guard !key.isEmpty, !key.isBlank else {
            throw IdempotencyRefusal(
                .badRequest, code: "INVALID_IDEMPOTENCY_KEY",
                "The Idempotency-Key header is empty: send a unique key (a UUID) for each request you may need to send again."
            )
        }
        guard key.count <= maximumKeyLength else {
            throw IdempotencyRefusal(
                .badRequest, code: "INVALID_IDEMPOTENCY_KEY",
                "The Idempotency-Key header is \(key.count) characters long; at most \(maximumKeyLength) are accepted."
            )
        }
        return key
    }

    /// What makes two requests the same request: method, path and query, content type and body.
    static func fingerprint(_ request: Request, body: ByteBuffer) -> String {
        var hash = SHA256()
        for part in [request.method.rawValue, request.uri.path, request.uri.query ?? "", request.headers.value(.contentType) ?? ""] {
            hash.update(data: Array(part.utf8))
            hash.update(data: [0])
        }
        body.withUnsafeReadableBytes { hash.update(bufferPointer: $0) }
        return hash.finalize().hexString
    }

    /// The answer for `key`: replayed when this caller sent this request under it before, else what `run` answers,
    /// kept for the next time.
    func respond(
        key: String, caller: Int64, fingerprint: String, now: Date = Date(), _ run: () async throws -> Response
    ) async throws -> Response {
        switch try await storage.claim(caller: caller, key: key, fingerprint: fingerprint, now: now) {
        case .claimed:
            break
        case .running:
            // Worth sending again soon, unlike a conflict of versions (also 409): the header tells them apart.
            throw IdempotencyRefusal(
                .conflict, code: "IDEMPOTENCY_KEY_IN_USE",
                "A request with this Idempotency-Key is still being processed. Send it again once that one has answered.",
                headers: [.retryAfter: "1"]
            )
        case .otherRequest:
            throw IdempotencyRefusal(
                .unprocessableContent, code: "IDEMPOTENCY_KEY_REUSED",
                "This Idempotency-Key was already used for a different request (another method, address or body). Use a new key for a new request."
            )
        case .answered(let kept):
            return kept.response
        }
        let response: Response
        do {
            response = try await run()
        } catch {
            try? await storage.release(caller: caller, key: key)
            throw error
        }
        guard Self.isKeepable(response) else {
            try await storage.release(caller: caller, key: key)
            return response
        }
        // The body is read once, to keep it and to send it.
        var answer = response
        let body = try await response.body.collected(expecting: response.body.contentLength ?? 0)
        answer.body = ResponseBody(byteBuffer: body)
        guard body.readableBytes <= Self.maximumKeptBody else {
            try await storage.release(caller: caller, key: key)
            return answer
        }
        try await storage.keep(KeptAnswer(answer, body: body), caller: caller, key: key, expiresAt: now.addingTimeInterval(Self.lifetime))
        return answer
    }

    static func isKeepable(_ response: Response) -> Bool {
        let code = response.status.code
        guard code < 500, ![408, 429].contains(code), code != 409 || response.headers.value(.retryAfter) == nil,
            response.headers.value(.xSessionToken) == nil
        else { return false }
        return !response.headers[values: .setCookie].contains { $0.hasPrefix("\(SessionCookie.name)=") }
    }

    /// Deletes what has expired, and first requests that never answered.
    @discardableResult
    func prune(now: Date = Date()) async throws -> Int {
        try await storage.deleteExpired(before: now, abandonedBefore: now.addingTimeInterval(-Self.abandonedAfter))
    }
}

/// A key that cannot be used: a page or `{"error"}` by ErrorMiddleware, a GraphQL error with `code` at `/graphql`;
/// either way with `headers`.
struct IdempotencyRefusal: Error {
    let status: HTTPResponse.Status
    let code: String
    let message: String
    let headers: HTTPFields

    init(_ status: HTTPResponse.Status, code: String, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    var appError: AppError { AppError(status, message: message) }
}

/// A kept answer: its status, its headers (not those of the connection it went on) and its body.
struct KeptAnswer: Sendable, Equatable {
    let status: Int
    let headers: [[String]]
    let body: ByteBuffer

    static let connectionFields: Set<HTTPField.Name> = [.date, .contentLength, .connection, .transferEncoding, .xRequestID]

    init(status: Int, headers: [[String]], body: ByteBuffer) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    init(_ response: Response, body: ByteBuffer) {
        status = response.status.code
        headers = response.headers.filter { !Self.connectionFields.contains($0.name) }.map { [$0.name.rawName, $0.value] }
        self.body = body
    }

    /// As first answered, marked as a replay (as Stripe's `Idempotent-Replayed`).
    var response: Response {
        var fields = HTTPFields()
        for pair in headers where pair.count == 2 {
            if let name = HTTPField.Name(pair[0]) { fields.append(HTTPField(name: name, value: pair[1])) }
        }
        fields[.idempotentReplayed] = "true"
        return Response(status: HTTPResponse.Status(code: status), headers: fields, body: ResponseBody(byteBuffer: body))
    }

    var encodedHeaders: String {
        String(decoding: (try? JSONEncoder().encode(headers)) ?? Data("[]".utf8), as: UTF8.self)
    }

    static func decodeHeaders(_ text: String) -> [[String]] {
        (try? JSONDecoder().decode([[String]].self, from: Data(text.utf8))) ?? []
    }
}

/// What the store knew of a key when a request claimed it.
enum IdempotencyClaim: Sendable, Equatable {
    /// The key is this request's now: run it.
    case claimed
    /// The same request is running under it.
    case running
    /// Another request used it.
    case otherRequest
    case answered(KeptAnswer)
}

extension HTTPField.Name {
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
    static let idempotentReplayed = HTTPField.Name("Idempotent-Replayed")!
}
