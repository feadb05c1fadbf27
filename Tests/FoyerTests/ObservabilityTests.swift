import CompressNIO
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

@Suite struct MetricsTests {
    @Test func countersMoveWithASessionAndRoutesAreLabelledByPattern() async throws {
        let harness = try await TestHarness { $0.metricsToken = "scrape-secret" }
        try await harness.test { client in
            try await signIn(client)
            try await client.execute(
                uri: "/api/v1/sessions", method: .post, headers: jsonHeaders,
                body: ByteBuffer(json: #"{"email": "\#(TestUser.bob.email)", "password": "not it"}"#)
            ) { #expect($0.status == .unauthorized) }
            for id in [4711, 4712] {
                try await client.execute(uri: "/posts/\(id)", method: .get) { #expect($0.status == .notFound) }
            }
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate]?.hasPrefix("Bearer") == true)
            }
            try await client.execute(uri: "/metrics", method: .get, headers: bearer("wrong")) { #expect($0.status == .unauthorized) }
            try await client.execute(uri: "/metrics", method: .get, headers: bearer("scrape-secret")) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/plain; version=0.0.4") == true)
                let text = response.text
                #expect(text.contains(#"foyer_sign_ins_total{outcome="success"} 1"#))
                #expect(text.contains(#"foyer_sign_ins_total{outcome="wrong_password"} 1"#))
                #expect(text.contains(#"foyer_sign_ins_total{outcome="throttled"} 0"#))
                #expect(text.contains(#"foyer_http_requests_total{route="/posts/{id}",method="GET",status="4xx"} 2"#))
                #expect(text.contains(#"foyer_http_requests_total{route="/api/v1/sessions",method="POST",status="2xx"} 1"#))
                #expect(text.contains(#"foyer_http_request_duration_seconds_count{route="/posts/{id}",method="GET",status="4xx"} 2"#))
                // (A duration may hold those digits: 0.154711853 did once.)
                #expect(!text.contains("/posts/4711") && !text.contains("/posts/4712"), "raw paths never become labels")
                #expect(text.contains("# HELP foyer_graphql_upstream_failures_total"))
            }
        }
    }

    @Test func withoutATokenMetricsAreOpen() async throws {
        try await TestHarness().test { client in
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains("foyer_websockets_open 0"))
            }
        }
    }
}

@Suite struct CompressionTests {
    static let gzip: HTTPFields = [.acceptEncoding: "gzip, deflate, br"]

    static func gunzip(_ buffer: ByteBuffer) throws -> ByteBuffer {
        var buffer = buffer
        return try buffer.decompress(with: .gzip())
    }

    @Test func turboScriptIsCompressedOnceAndRevalidates() async throws {
        let file = try Data(contentsOf: URL(fileURLWithPath: packageRoot + "/Public/turbo.min.js"))
        try await TestHarness().test { client in
            let eTag = try await client.execute(uri: "/turbo.min.js", method: .get, headers: Self.gzip) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentEncoding] == "gzip")
                #expect(response.headers[values: .vary].contains("Accept-Encoding"))
                #expect(response.headers[.contentLength] == String(response.body.readableBytes))
                #expect(response.body.readableBytes < file.count / 2)
                #expect(Data(buffer: try Self.gunzip(response.body)) == file)
                return try #require(response.headers[.eTag])
            }
            try await client.execute(uri: "/turbo.min.js", method: .get, headers: Self.gzip.merging([.ifNoneMatch: eTag])) { response in
                #expect(response.status == .notModified)
                #expect(response.headers[.contentEncoding] == nil)
                #expect(response.body.readableBytes == 0)
            }
            try await client.execute(uri: "/turbo.min.js", method: .get) { response in
                #expect(response.headers[.contentEncoding] == nil)
                #expect(response.headers[values: .vary].contains("Accept-Encoding"))
                #expect(Data(buffer: response.body) == file)
            }
        }
    }

    @Test func pagesAndJSONAreCompressedWhenAskedAndLargeEnough() async throws {
        try await TestHarness().test { client in
            let (token, _) = try await signIn(client)
            for number in 1...8 {
                try await client.execute(
                    uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders),
                    body: ByteBuffer(json: #"{"title": "Post \#(number)", "content": "Enough words to make the list longer than a kilobyte."}"#)
                ) { #expect($0.status == .created) }
            }
            let plain = try await client.execute(uri: "/posts.json", method: .get) { $0.body }
            try await client.execute(uri: "/posts.json", method: .get, headers: Self.gzip) { response in
                #expect(response.headers[.contentEncoding] == "gzip")
                let body = try Self.gunzip(response.body)
                #expect(body == plain)
            }
            try await client.execute(uri: "/posts", method: .get, headers: Self.gzip.merging(browserHeaders)) { response in
                #expect(response.headers[.contentEncoding] == "gzip")
                let page = String(buffer: try Self.gunzip(response.body))
                #expect(page.contains("Post 8"))
            }
            for refusal in ["gzip;q=0", "identity", "br", "*;q=0"] {
                try await client.execute(uri: "/posts.json", method: .get, headers: [.acceptEncoding: refusal]) { response in
                    #expect(response.headers[.contentEncoding] == nil, "\(refusal)")
                    #expect(response.body == plain)
                }
            }
            try await client.execute(uri: "/posts.json", method: .head, headers: Self.gzip) { response in
                #expect(response.headers[.contentEncoding] == nil)
            }
            try await client.execute(uri: "/up", method: .get, headers: Self.gzip) { response in
                #expect(response.headers[.contentEncoding] == nil, "under a kilobyte")
                #expect(response.text == "OK")
            }
        }
    }

    /// The list goes out gzip'd from its body and the layout deflated ahead (`GzipMember`): byte for byte the page
    /// sent uncompressed, for each of the layout's variants and with every per-request value in it.
    @Test func theListSentGzippedIsThePageSentPlainInEveryVariant() async throws {
        try await TestHarness().test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(json: #"{"title": "Fish & <chips>", "content": "Words \"quoted\" and 'single' & more."}"#)
            ) { #expect($0.status == .created) }
            let readers: [HTTPFields] = [
                browserHeaders,
                browserHeaders.merging([.cookie: "foyer_session=\(token)"]),
                browserHeaders.merging([.cookie: "foyer_session=\(token); foyer_flash=post-published", .acceptLanguage: "pt-BR"]),
                [.userAgent: "Hotwire Native iOS; Turbo Native iOS", .cookie: "foyer_session=\(token); foyer_flash=signed-in"],
                [.cookie: "foyer_flash=signed-out"],
            ]
            for reader in readers {
                try await Self.expectGzipMatchesPlain(client, uri: "/posts", headers: reader, status: .ok)
            }
        }
    }

    /// Other pages deflate only their body for the request: byte for byte what is sent uncompressed, a form page,
    /// an error page and a native shell's page among them.
    @Test func everyPageSentGzippedIsThePageSentPlain() async throws {
        try await TestHarness().test { client in
            let (token, _) = try await signIn(client)
            let id = try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders),
                body: ByteBuffer(json: #"{"title": "A post & its <page>", "content": "Enough words to make the page's body worth compressing."}"#)
            ) { response in
                #expect(response.status == .created)
                return try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])["id"] as? Int
            }
            let signedIn = browserHeaders.merging([.cookie: "foyer_session=\(token)"])
            let pages: [(String, HTTPFields, HTTPResponse.Status)] = [
                ("/posts/\(id ?? 0)", browserHeaders, .ok),
                ("/posts/\(id ?? 0)", signedIn.merging([.cookie: "foyer_session=\(token); foyer_flash=post-saved"]), .ok),
                ("/posts/new", signedIn, .ok),
                ("/posts/\(id ?? 0)/edit", [.userAgent: "Hotwire Native Android; Turbo Native Android", .cookie: "foyer_session=\(token)"], .ok),
                ("/posts/999999", browserHeaders, .notFound),
            ]
            for (uri, reader, status) in pages {
                try await Self.expectGzipMatchesPlain(client, uri: uri, headers: reader, status: status)
            }
        }
    }

    /// The page `uri` gzipped is byte for byte the page sent plain. A page names the live stream's latest event,
    /// which a post made just before moves once its broadcast lands: the two are compared between two plain
    /// fetches that agree.
    static func expectGzipMatchesPlain(_ client: some TestClientProtocol, uri: String, headers: HTTPFields, status: HTTPResponse.Status) async throws {
        for _ in 0..<100 {
            let plain = try await client.execute(uri: uri, method: .get, headers: headers) { response in
                #expect(response.status == status, "\(uri)")
                #expect(response.headers[.contentEncoding] == nil)
                return response.body
            }
            let unzipped = try await client.execute(uri: uri, method: .get, headers: headers.merging(gzip)) { response in
                #expect(response.status == status, "\(uri)")
                #expect(response.headers[.contentEncoding] == "gzip", "\(uri)")
                #expect(response.headers[.vary]?.hasSuffix(", Accept-Encoding") == true)
                #expect(response.headers[.contentLength] == String(response.body.readableBytes))
                #expect(response.body.readableBytes < plain.readableBytes * 2 / 3, "\(uri)")
                return try gunzip(response.body)
            }
            let plainAfter = try await client.execute(uri: uri, method: .get, headers: headers) { $0.body }
            guard plain == plainAfter else { continue }
            #expect(unzipped == plain, "\(uri)")
            return
        }
        Issue.record("\(uri) never read the same twice")
    }

    /// Values a page takes per request go into the member stored, in blocks of at most 65,535 bytes.
    @Test func storedValuesOfAnyLengthKeepTheMemberWhole() throws {
        let deflater = try PieceDeflater(level: 9)
        let head = try deflater.piece("<p>before</p>")
        let tail = try deflater.piece(String(repeating: "after ", count: 1000))
        for length in [0, 1, 65_535, 65_536, 140_000] {
            let value = String(repeating: "x", count: length)
            var member = GzipMember(capacity: 0)
            member.append(head)
            member.appendStored(ByteBuffer(string: value))
            member.append(tail)
            let whole = try Self.gunzip(member.finish())
            #expect(String(buffer: whole) == "<p>before</p>" + value + String(repeating: "after ", count: 1000), "\(length)")
        }
    }

    @Test func acceptEncodingIsReadWithItsWeights() {
        #expect(CompressionMiddleware.acceptsGzip(["gzip"]))
        #expect(CompressionMiddleware.acceptsGzip(["br;q=1.0, gzip;q=0.8, *;q=0.1"]))
        #expect(CompressionMiddleware.acceptsGzip(["*"]))
        #expect(!CompressionMiddleware.acceptsGzip(["gzip;q=0"]))
        #expect(!CompressionMiddleware.acceptsGzip(["gzip; q=0.000"]))
        #expect(!CompressionMiddleware.acceptsGzip(["*, gzip;q=0"]))
        #expect(!CompressionMiddleware.acceptsGzip([]))
        #expect(!CompressionMiddleware.acceptsGzip(["deflate, br"]))
    }

    @Test func compressibleTypesAreReadWithoutCaseParametersOrSpaces() {
        for type in ["text/html", "text/html; charset=utf-8", "Text/HTML;charset=UTF-8", " application/json ", "application/problem+json", "APPLICATION/LD+JSON", "image/svg+xml"] {
            #expect(CompressionMiddleware.isCompressible(type), "\(type)")
        }
        for type in [nil, "", "image/png", "text/htm", "text/html2", "application/jsonx", "json", "+jso", "text/event-stream"] {
            #expect(!CompressionMiddleware.isCompressible(type), "\(type ?? "nil")")
        }
    }

    @Test func varyNamesAcceptEncodingOnceWhateverItListedBefore() {
        func vary(_ fields: [String]) -> [String] {
            var headers = HTTPFields(fields.map { HTTPField(name: .vary, value: $0) })
            CompressionMiddleware.varyOnAcceptEncoding(&headers)
            return headers[values: .vary]
        }
        #expect(vary([]) == ["Accept-Encoding"])
        #expect(vary(["Accept-Language"]) == ["Accept-Language, Accept-Encoding"])
        #expect(vary(["User-Agent,accept-encoding"]) == ["User-Agent,accept-encoding"])
        #expect(vary(["Origin", "Cookie ,\tACCEPT-ENCODING"]) == ["Origin", "Cookie ,\tACCEPT-ENCODING"])
        #expect(vary(["*"]) == ["*"])
        #expect(vary(["Origin", "Cookie"]) == ["Origin, Cookie, Accept-Encoding"])
        // Named inside another field's name is not named.
        #expect(vary(["X-Accept-Encoding-Hint"]) == ["X-Accept-Encoding-Hint, Accept-Encoding"])
    }
}

@Suite struct RequestTraceTests {
    @Test func aValidTraceparentIsContinuedWithANewSpan() {
        let trace = RequestTrace(requestID: "abc", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", traceState: "vendor=1")
        #expect(trace.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(trace.spanID != "00f067aa0ba902b7")
        #expect(trace.traceparent == "00-4bf92f3577b34da6a3ce929d0e0e4736-\(trace.spanID)-01")
        #expect(trace.traceState == "vendor=1")
        // A later version is read as version 00, whatever follows the flags.
        #expect(RequestTrace.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more")?.flags == "00")
    }

    @Test func anythingElseStartsANewTrace() {
        for invalid in [
            "", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero parent id
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // forbidden version
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // version 00 has exactly four parts
        ] {
            #expect(RequestTrace.parse(invalid) == nil, "\(invalid)")
            let trace = RequestTrace(requestID: "x", traceparent: invalid, traceState: "dropped=1")
            #expect(trace.traceID.count == 32 && trace.spanID.count == 16 && trace.flags == "01")
            #expect(trace.traceState == nil)
        }
    }

    /// Ids are written digit by digit into their strings: each must still be lowercase hex of its length, and a new
    /// trace's traceparent one that a peer (and we) can parse.
    @Test func newIdsAreLowercaseHexOfTheirLength() {
        let hexDigits = Set("0123456789abcdef")
        var seen = Set<String>()
        for _ in 0..<200 {
            let id = RequestTrace.newRequestID()
            #expect(id.count == 32 && id.allSatisfy(hexDigits.contains), "\(id)")
            seen.insert(id)
            let trace = RequestTrace(requestID: id, traceparent: nil, traceState: nil)
            #expect(trace.spanID.count == 16 && trace.spanID.allSatisfy(hexDigits.contains), "\(trace.spanID)")
            #expect(RequestTrace.parse(trace.traceparent)?.traceID == trace.traceID, "\(trace.traceparent)")
        }
        #expect(seen.count == 200)
    }

    @Test func theAccessLineSaysMethodPathStatusAndTenthsOfAMillisecond() {
        let head = HTTPRequest(method: .get, scheme: "http", authority: "foyer.test", path: "/posts?page=2", headerFields: [:])
        let request = Request(head: head, body: .init(buffer: ByteBuffer()))
        #expect(RequestLogMiddleware.line(request, .ok, .microseconds(40)) == "GET /posts 200 0.0ms")
        #expect(RequestLogMiddleware.line(request, .notFound, .microseconds(1_250)) == "GET /posts 404 1.3ms")
        #expect(RequestLogMiddleware.line(request, .ok, .microseconds(12_340)) == "GET /posts 200 12.3ms")
        #expect(RequestLogMiddleware.line(request, .ok, .seconds(2)) == "GET /posts 200 2000.0ms")
    }
}

@Suite struct QueryAnalysisTests {
    @Test func cachedVerdictsAreTheParsedOnes() {
        let cache = QueryAnalysisCache()
        let deep = "{ " + String(repeating: "a { ", count: 16) + "b" + String(repeating: " }", count: 16) + " }"
        for _ in 0..<2 {
            #expect(cache.analysis(of: deep).violation?.contains("17 levels deep") == true)
            let named = cache.analysis(of: "query Read { allTasks { id } } mutation Write { createTask(title: \"t\") { id } }")
            #expect(named.violation == nil)
            #expect(named.operationType(named: "Write") == .mutation)
            #expect(named.operationType(named: nil) == .query)
            #expect(cache.analysis(of: "{ not graphql").operations == nil)
        }
    }
}
