import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer

/// What pages say to people: device names, times, one-shot notices, fields with their errors.
@Suite struct PagesTests {
    @Test(arguments: [
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", "Safari on iPhone"),
        ("Mozilla/5.0 (iPad; CPU OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Mobile/15E148 Safari/604.1", "Safari on iPad"),
        ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.39 Mobile Safari/537.36", "Chrome on Android"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0", "Firefox on Windows"),
        ("Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "Firefox on Linux"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "Chrome on macOS"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", "Safari on macOS"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", "Edge on Windows"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 Hotwire Native iOS; Turbo Native iOS; bridge-components: [form menu]", "Hotwire Native iOS app"),
        ("Mozilla/5.0 (Linux; Android 14; Pixel 8 Build/AP2A; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/131.0.6778.39 Mobile Safari/537.36 Hotwire Native Android; Turbo Native Android; bridge-components: [form]", "Hotwire Native Android app"),
        ("curl/8.11.0", "curl"),
        ("python-requests/2.34.2", "Python (requests)"),
        ("SomethingElse/1.0", "Unknown device"),
        ("", "Unknown device"),
    ])
    func devicesAreNamedAsPeopleSayThem(userAgent: String, name: String) {
        #expect(DeviceName.describe(userAgent) == name)
    }

    @Test func timesAreSaidAsPeopleSayThem() throws {
        let now = try Date("2026-11-24T14:30:00Z", strategy: .iso8601)
        let english = try #require(try Languages.bundled().language(tag: "en"))
        let utc = ReaderTime(now: now, language: english)
        #expect(utc.relative(now.addingTimeInterval(-20)) == "just now")
        #expect(utc.relative(now.addingTimeInterval(-60)) == "1 minute ago")
        #expect(utc.relative(now.addingTimeInterval(-180)) == "3 minutes ago")
        #expect(utc.relative(now.addingTimeInterval(-2 * 3600)) == "2 hours ago")
        #expect(utc.relative(try Date("2026-11-23T14:05:00Z", strategy: .iso8601)) == "yesterday at 2:05\u{202F}PM")
        #expect(utc.relative(try Date("2026-11-20T09:00:00Z", strategy: .iso8601)) == "Friday at 9:00\u{202F}AM")
        #expect(utc.relative(try Date("2026-03-02T08:15:00Z", strategy: .iso8601)) == "Mar 2 at 8:15\u{202F}AM")
        #expect(utc.relative(try Date("2025-03-02T08:15:00Z", strategy: .iso8601)) == "Mar 2, 2025")
        #expect(utc.exact(try Date("2026-11-23T14:05:09Z", strategy: .iso8601)) == "Nov 23, 2026 at 2:05:09\u{202F}PM UTC")

        // 00:30 in Tokyo is still yesterday in UTC: the reader's zone decides what "yesterday" is.
        let tokyo = ReaderTime(now: now, timeZone: try #require(TimeZone(identifier: "Asia/Tokyo")), language: english)
        #expect(tokyo.relative(try Date("2026-11-23T15:30:00Z", strategy: .iso8601)) == "23 hours ago")
        #expect(tokyo.relative(try Date("2026-11-23T14:30:00Z", strategy: .iso8601)) == "yesterday at 11:30\u{202F}PM")

        // Words kept once said are kept for their language: the same counts, asked in English again and in Portuguese.
        #expect(utc.relative(now.addingTimeInterval(-180)) == "3 minutes ago")
        let portuguese = ReaderTime(now: now, language: try #require(try Languages.bundled().language(tag: "pt-BR")))
        #expect(portuguese.relative(now.addingTimeInterval(-180)) == "há 3 minutos")
        #expect(portuguese.relative(now.addingTimeInterval(-2 * 3600)) == "há 2 horas")
        // Exact times kept once said are kept for their zone and language too.
        let said = try Date("2026-11-23T14:05:09Z", strategy: .iso8601)
        #expect(utc.exact(said) == "Nov 23, 2026 at 2:05:09\u{202F}PM UTC")
        #expect(tokyo.exact(said).hasPrefix("Nov 23, 2026 at 11:05:09\u{202F}PM "))
        #expect(portuguese.exact(said) != utc.exact(said))
    }

    /// A post's text as HTML, kept by its text: the same text the same HTML, another text its own.
    @Test func postTextIsEscapedIntoParagraphsEachTimeAlike() {
        let text = "First <line>\r\nsecond & line\n\n  \nAnother paragraph"
        let html = "<p>First &lt;line&gt;<br>\nsecond &amp; line</p>\n<p>Another paragraph</p>\n"
        #expect(PostText.html(text) == html)
        #expect(PostText.html(text) == html)
        #expect(PostText.html(text + "!") == "<p>First &lt;line&gt;<br>\nsecond &amp; line</p>\n<p>Another paragraph!</p>\n")
    }

    @Test func aPagePutsTimesInTheReadersZoneFromItsCookie() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(json: #"{"title": "Zoned"}"#)
            ) { #expect($0.status == .created) }
            for (cookie, zone) in [("tz=Asia%2FTokyo", "GMT+9"), ("tz=Not%2FAZone", "UTC"), ("", "UTC")] {
                try await client.execute(uri: "/posts", method: .get, headers: cookie.isEmpty ? [:] : [.cookie: cookie]) { response in
                    let html = response.text
                    #expect(html.contains(">just now</time>"))
                    #expect(html.contains(" \(zone)\"") || html.contains(" JST\""), "\(cookie): \(html.components(separatedBy: "<time").dropFirst().first ?? "")")
                }
            }
        }
    }

    @Test func aNoticeFollowsTheRedirectOnceAndIsThenSpent() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (session, csrf) = try await browserSession(client)
            var headers = session
            headers[.contentType] = "application/x-www-form-urlencoded"
            let flashCookie = try await client.execute(
                uri: "/posts", method: .post, headers: headers, body: ByteBuffer(string: "authenticity_token=\(csrf)&title=Noticed&content=")
            ) { response in
                #expect(response.status == .seeOther)
                return try #require(response.cookie(named: Flash.cookieName))
            }
            #expect(flashCookie.contains("post-published") && flashCookie.contains("Max-Age=60"))
            let location = "/posts"
            var next = session
            next[.cookie] = (session[.cookie] ?? "") + "; " + String(flashCookie.prefix { $0 != ";" })
            try await client.execute(uri: location, method: .get, headers: next) { response in
                #expect(response.text.contains(#"<div id="flash" class="notice" role="status" data-turbo-cache="false">Your post is published.</div>"#))
                let spent = try #require(response.cookie(named: Flash.cookieName))
                #expect(spent.contains("Max-Age=0"))
            }
            // A native shell's historical-location page passes it on to the screen it reloads.
            var native = next
            native[.userAgent] = "Hotwire Native iOS; Turbo Native iOS"
            try await client.execute(uri: HistoricalLocation.refresh.path, method: .get, headers: native) { response in
                #expect(response.cookie(named: Flash.cookieName) == nil)
                #expect(!response.text.contains("Your post is published."))
            }
            // Without the cookie there is nothing to say, and an unknown notice says nothing.
            var forged = session
            forged[.cookie] = (session[.cookie] ?? "") + "; \(Flash.cookieName)=%3Cscript%3E"
            try await client.execute(uri: location, method: .get, headers: forged) { response in
                #expect(response.text.contains(#"<div id="flash" class="notice" role="status" data-turbo-cache="false"></div>"#))
            }
        }
    }

    @Test func aFieldWithAnErrorSaysSoNextToIt() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (session, csrf) = try await browserSession(client)
            var headers = session
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: "/posts", method: .post, headers: headers, body: ByteBuffer(string: "authenticity_token=\(csrf)&title=+&content=kept")
            ) { response in
                #expect(response.status == .unprocessableContent)
                let html = response.text
                #expect(html.contains(#"aria-invalid="true" aria-describedby="title-error""#))
                #expect(html.contains(#"<p class="field-error" id="title-error">Title can&#39;t be blank</p>"#) || html.contains(#"id="title-error">Title can't be blank</p>"#), "\(html)")
                #expect(html.contains(">kept</textarea>"), "what was typed stays")
            }
            try await client.execute(
                uri: "/tasks", method: .post, headers: headers, body: ByteBuffer(string: "authenticity_token=\(csrf)&title=&description=d&status=OPEN")
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains(#"id="task-title" name="title" value="" required aria-invalid="true" aria-describedby="title-error""#))
            }
        }
    }

    @Test func signingOutEverywhereElseKeepsOnlyThisDevice() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (phone, _) = try await signIn(client, userAgent: "Phone")
            let (session, csrf) = try await browserSession(client)
            try await client.execute(uri: "/account", method: .get, headers: session) { response in
                #expect(response.text.contains("Sign out everywhere else"))
            }
            var headers = session
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: "/account/other_sessions", method: .post, headers: headers,
                body: ByteBuffer(string: "_method=delete&authenticity_token=\(csrf)")
            ) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/account")
            }
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(phone)) { #expect($0.status == .unauthorized) }
            try await client.execute(uri: "/account", method: .get, headers: session) { response in
                #expect(response.status == .ok)
                #expect(!response.text.contains("Sign out everywhere else"), "no other device is left")
            }
        }
    }
}
