import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

/// Pages in the reader's language: the catalogs, their plural rules, how a request's language is chosen, and that
/// no word is missing in any language.
@Suite struct LanguagesTests {
    // MARK: Plural rules and catalogs

    @Test func pluralRulesPickCLDRsFormsForEachLanguage() throws {
        let english = try PluralRule(header: "nplurals=2; plural=(n != 1);")
        let brazilian = try PluralRule(header: "nplurals=2; plural=(n > 1);")
        let chinese = try PluralRule(header: "nplurals=1; plural=0;")
        #expect([0, 1, 2, 5].map(english.form) == [1, 0, 1, 1])
        // Portuguese says "0 segundo" as it says "1 segundo": 0 and 1 are both "one".
        #expect([0, 1, 2, 5].map(brazilian.form) == [0, 0, 1, 1])
        #expect([0, 1, 2, 5].map(chinese.form) == [0, 0, 0, 0])
        // A language with three forms (Polish), to show the whole expression language is read.
        let polish = try PluralRule(header: "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);")
        #expect([1, 2, 4, 5, 12, 22, 25].map(polish.form) == [0, 1, 1, 2, 2, 1, 2])
    }

    @Test(arguments: [
        "nplurals=2;", "plural=(n != 1);", "nplurals=2; plural=(n != 1", "nplurals=2; plural=n ? 1;", "nplurals=9; plural=0;",
        "nplurals=2; plural=(x != 1);", "nplurals=2; plural=(n != 1); extra=1;",
    ])
    func aPluralRuleThatIsNotOneIsRefused(header: String) {
        #expect(throws: CatalogError.self) { try PluralRule(header: header) }
    }

    @Test func aCatalogReadsPOAsTranslatorsToolsWriteIt() throws {
        let catalog = try Catalog(po: #"""
            # A translator's comment
            msgid ""
            msgstr ""
            "Language: pt_BR\n"
            "Plural-Forms: nplurals=2; plural=(n > 1);\n"

            #. English: Hello
            #, fuzzy
            msgctxt "greeting"
            msgid "greeting"
            msgstr "Olá, "
            "{{name}}: \"bem-vindo\"\\n"

            msgid "seconds"
            msgid_plural "seconds"
            msgstr[0] "{{count}} segundo"
            msgstr[1] "{{count}} segundos"
            """#)
        #expect(catalog.tag == "pt-BR")
        #expect(catalog.messages["greeting"] == .text(#"Olá, {{name}}: "bem-vindo"\n"#))
        #expect(catalog.messages["seconds"] == .plural(["{{count}} segundo", "{{count}} segundos"]))
    }

    @Test func theWordsScriptsShowAreJSONThatCannotEndTheirScriptElement() throws {
        let catalog = try Catalog(po: #"""
            msgid ""
            msgstr ""
            "Language: en\n"
            "Plural-Forms: nplurals=2; plural=(n != 1);\n"

            msgid "js.quoted"
            msgstr "She said \"</script><b>\" \\ then\nleft"

            msgid "tasks.status.open"
            msgstr "Open"

            msgid "posts.title"
            msgstr "Posts"
            """#)
        let words = Language(index: 0, catalog: catalog).scriptWords
        #expect(!words.contains("<"), "\(words)")
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(words.utf8)) as? [String: String])
        #expect(parsed == ["quoted": "She said \"</script><b>\" \\ then\nleft", "tasks.status.open": "Open"])
    }

    @Test(arguments: [
        ("msgid \"a\"\nmsgstr \"b\"", "no header"),
        ("msgid \"\"\nmsgstr \"Plural-Forms: nplurals=1; plural=0;\\n\"", "names no Language"),
        ("msgid \"\"\nmsgstr \"Language: en\\nPlural-Forms: nplurals=1; plural=0;\\n\"\nmsgid \"a\"\nmsgstr \"\"", "a has no translation"),
        ("msgid \"\"\nmsgstr \"Language: en\\nPlural-Forms: nplurals=1; plural=0;\\n\"\nmsgid \"a\"\nmsgstr \"x\"\nmsgid \"a\"\nmsgstr \"y\"", "there twice"),
        ("msgid \"\"\nmsgstr \"Language: en\\nPlural-Forms: nplurals=2; plural=(n != 1);\\n\"\nmsgid \"a\"\nmsgid_plural \"a\"\nmsgstr[0] \"x\"", "needs 2 forms"),
        ("msgid \"\"\nmsgstr \"Language: en\\nPlural-Forms: nplurals=1; plural=0;\\n\"\nmsgid \"a\"\nmsgstr \"\\q\"", "no escape"),
    ])
    func aCatalogWithAMistakeIsRefusedSayingWhat(po: String, why: String) {
        #expect {
            try Catalog(po: po)
        } throws: { error in
            "\(error)".contains(why)
        }
    }

    @Test func theShippedCatalogsSayPluralsInEachLanguagesForms() throws {
        let languages = try Languages.bundled()
        #expect(languages.all.map(\.tag) == ["en", "pt-BR", "zh-Hans"])
        let said = try ["en", "pt-BR", "zh-Hans"].map { tag in
            let language = try #require(languages.language(tag: tag))
            return [0, 1, 2, 5].map { language.plural("throttle.sign_ins_seconds", count: $0) }
        }
        #expect(said[0] == [0, 1, 2, 5].map { "Too many failed sign-ins. Try again in \($0) second\($0 == 1 ? "" : "s")." })
        #expect(said[1] == [0, 1, 2, 5].map { "Muitas tentativas de entrada sem sucesso. Tente de novo em \($0) segundo\($0 > 1 ? "s" : "")." })
        #expect(said[2] == [0, 1, 2, 5].map { "登录失败次数过多。请在 \($0) 秒后重试。" })
        // Counts are written as the locale writes numbers.
        #expect(languages.language(tag: "pt-BR")?.plural("throttle.requests_minutes", count: 1500).contains("1.500 minutos") == true)
        #expect(languages.language(tag: "en")?.plural("throttle.requests_minutes", count: 1500).contains("1,500 minutes") == true)
    }

    // MARK: Choosing the language

    @Test(arguments: [
        ("pt-BR", "pt-BR"), ("pt", "pt-BR"), ("pt-PT", "pt-BR"), ("PT-br", "pt-BR"), ("zh", "zh-Hans"), ("zh-CN", "zh-Hans"),
        ("zh-SG", "zh-Hans"), ("zh-Hans-HK", "zh-Hans"), ("zh-TW", "en"), ("zh-HK,pt;q=0.8", "pt-BR"), ("en-GB", "en"),
        ("fr-FR, fr;q=0.9, pt;q=0.5, en;q=0.4", "pt-BR"), ("en;q=0.2, zh-CN;q=0.8", "zh-Hans"), ("pt;q=0, en", "en"),
        ("*", "en"), ("fr, *;q=0.5, zh;q=0.4", "en"), ("de", "en"), ("", "en"), ("x-klingon, ;;, pt", "pt-BR"),
    ])
    func acceptLanguageIsLookedUpWithSensibleFallbacks(header: String, chosen: String) throws {
        #expect(try Languages.bundled().choose(acceptLanguage: header).tag == chosen)
    }

    @Test func theDefaultLanguageIsWhoeverNobodyElseDecidesFor() throws {
        let languages = try Languages.bundled(defaultTag: "pt-BR")
        #expect(languages.choose(acceptLanguage: "de").tag == "pt-BR")
        #expect(languages.choose(acceptLanguage: nil).tag == "pt-BR")
        #expect(languages.choose(acceptLanguage: "en-US").tag == "en")
        #expect(throws: StartupError.self) { try Languages.bundled(defaultTag: "fr") }
    }

    // MARK: No word missing

    /// Every key the templates and the code use, in every catalog; and no key in any catalog that nobody uses.
    @Test func everyLanguageHasEveryWordUsedAndNoneUnused() throws {
        let problems = LanguagesTests.missingAndUnused(in: try Languages.bundled().all.map(\.catalog), used: try Self.usedKeys())
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    /// The check above fails when a word is taken out of one catalog, and when a catalog holds one nobody uses.
    @Test func theMissingWordCheckSeesAWordTakenOut() throws {
        let used = try Self.usedKeys()
        var catalogs = try Languages.bundled().all.map(\.catalog)
        let removed = try #require(used.sorted().first { catalogs[1].messages[$0] != nil })
        catalogs[1] = Catalog(tag: catalogs[1].tag, plural: catalogs[1].plural, messages: catalogs[1].messages.filter { $0.key != removed })
        #expect(Self.missingAndUnused(in: catalogs, used: used) == ["pt-BR.po lacks \(removed)"])
        catalogs[2] = Catalog(tag: catalogs[2].tag, plural: catalogs[2].plural, messages: catalogs[2].messages.merging(["nobody.uses": .text("x")]) { $1 })
        #expect(Self.missingAndUnused(in: catalogs, used: used).contains("zh-Hans.po has nobody.uses, which nothing uses"))
    }

    /// A template that does not parse stops start-up naming its file and line, as an unclosed `{{t` tag does.
    @Test(arguments: [
        ("<p>\n{{#open}}never closed\n", "Templates/posts/broken.mustache: expectedSectionEnd at line 3"),
        ("<p>{{t posts.index.title</p>\n", "Templates/posts/broken.mustache: a {{t tag is not closed"),
    ])
    func aBrokenTemplateStopsStartUpSayingWhere(template: String, message: String) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("templates-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.copyItem(at: URL(fileURLWithPath: packageRoot + "/Templates"), to: directory)
        try template.write(to: directory.appendingPathComponent("posts/broken.mustache"), atomically: true, encoding: .utf8)
        #expect {
            try Views(directory: directory.path, turboScriptURL: "/turbo.js", offline: false, languages: try Languages.bundled())
        } throws: { error in
            "\(error)" == message
        }
    }

    static func missingAndUnused(in catalogs: [Catalog], used: Set<String>) -> [String] {
        catalogs.flatMap { catalog in
            used.subtracting(catalog.messages.keys).sorted().map { "\(catalog.tag).po lacks \($0)" }
                + Set(catalog.messages.keys).subtracting(used).sorted().map { "\(catalog.tag).po has \($0), which nothing uses" }
        }
    }

    /// `{{t key}}` in templates; `Phrase("key"`, `.text("key"` and `.plural("key"` in Sources; the notices by name.
    static func usedKeys() throws -> Set<String> {
        var keys = Set(Flash.allCases.map { $0.phrase.key } + ValidationFailed.namedFields.map { "attributes." + $0 })
        keys.insert("language.name")
        for template in try Views.templates(in: packageRoot + "/Templates").values {
            keys.formUnion(TemplateWords.keys(in: template))
        }
        let call = try Regex(#"(?:Phrase\(|\.text\(|\.plural\()\s*"([a-z0-9_\-]+(?:\.[a-z0-9_\-]+)+)""#)
        let sources = URL(fileURLWithPath: packageRoot + "/Sources")
        for case let file as URL in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)! where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: call) {
                if let key = match.output[1].substring { keys.insert(String(key)) }
            }
        }
        // Scripts say `foyerWords("key"`: the catalogs' `js.key`.
        let scriptCall = try Regex(#"foyerWords\("([a-z0-9_]+)""#)
        for file in try FileManager.default.contentsOfDirectory(atPath: packageRoot + "/Public") where file.hasSuffix(".js") {
            let text = try String(contentsOfFile: packageRoot + "/Public/" + file, encoding: .utf8)
            for match in text.matches(of: scriptCall) {
                if let key = match.output[1].substring { keys.insert("js." + key) }
            }
        }
        // offline.js names the task statuses by a table.
        keys.formUnion(["js.not_saved_changed", "js.not_saved_deleted", "js.refused", "js.not_sent"])
        return keys
    }

    // MARK: Pages and the API

    @Test func aPageSaysItsLanguageAndVariesByIt() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for (header, tag, heading) in [("pt-PT,pt;q=0.9", "pt-BR", "<h1>Entrar</h1>"), ("zh-CN", "zh-Hans", "<h1>登录</h1>"), ("de", "en", "<h1>Sign in</h1>")] {
                try await client.execute(uri: "/sign_in", method: .get, headers: [.acceptLanguage: header]) { response in
                    #expect(response.headers[.contentLanguage] == tag)
                    #expect(response.headers[values: .vary].joined(separator: ",").contains("Accept-Language"))
                    #expect(response.text.contains(#"<html lang="\#(tag)">"#))
                    #expect(response.text.contains(heading))
                }
            }
            // The posts list is kept once per language.
            for (header, heading) in [("pt-BR", "<h1>Publicações</h1>"), ("zh", "<h1>帖子</h1>"), ("en", "<h1>Posts</h1>"), ("pt-BR", "<h1>Publicações</h1>")] {
                try await client.execute(uri: "/posts", method: .get, headers: [.acceptLanguage: header]) { #expect($0.text.contains(heading)) }
            }
        }
    }

    @Test func aWrongPasswordIsSaidInTheReadersLanguage() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            for (header, words) in [("pt-BR", "E-mail ou senha incorretos."), ("zh-CN", "邮箱或密码不正确。")] {
                let (headers, token) = try await signInForm(client, headers: [.acceptLanguage: header])
                let body = formBody([("authenticity_token", token), ("email", TestUser.ada.email), ("password", "not the password")])
                try await client.execute(uri: "/sign_in", method: .post, headers: headers.merging([.acceptLanguage: header]), body: body) { response in
                    #expect(response.status == .unprocessableContent)
                    #expect(response.text.contains(words))
                }
            }
        }
    }

    @Test func jsonErrorsAreSaidInTheLanguageAskedForWithTheSameKeys() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let body = ByteBuffer(string: #"{"title": " ", "content": "x"}"#)
            for (header, message) in [("en", "can't be blank"), ("pt-BR", "não pode ficar em branco"), ("zh-Hans", "不能为空")] {
                try await client.execute(
                    uri: "/api/v1/posts", method: .post, headers: bearer(token).merging(jsonHeaders).merging([.acceptLanguage: header]), body: body
                ) { response in
                    #expect(response.status == .unprocessableContent)
                    #expect(response.headers[.contentLanguage] == Languages.shipped?.choose(acceptLanguage: header).tag)
                    let errors = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])["errors"]
                    #expect((errors as? [String: [String]]) == ["title": [message]])
                }
            }
        }
    }

    @Test func errorPagesAndJSONErrorsAreSaidInTheReadersLanguage() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/posts/999999", method: .get, headers: [.acceptLanguage: "pt-BR", .accept: "text/html"]) { response in
                #expect(response.status == .notFound)
                #expect(response.text.contains("<h1>Publicação não encontrada</h1>"))
                #expect(response.text.contains("Não existe a publicação 999999."))
            }
            try await client.execute(uri: "/api/v1/posts/999999", method: .get, headers: [.acceptLanguage: "zh-CN"]) { response in
                #expect(response.status == .notFound)
                #expect(response.text.contains("不存在帖子 999999"))
            }
            try await client.execute(uri: "/no/such/page", method: .get, headers: [.acceptLanguage: "zh", .accept: "text/html"]) { response in
                #expect(response.status == .notFound)
                #expect(response.text.contains("这个地址什么都没有。"))
            }
        }
    }

    /// A request the API cannot read is refused in the reader's language too: a field of the wrong type, a body that
    /// is not JSON, a page number out of range, a method a route does not take.
    @Test func malformedRequestsAreRefusedInTheReadersLanguage() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            let json = bearer(token).merging(jsonHeaders)
            try await client.execute(
                uri: "/api/v1/posts", method: .post, headers: json.merging([.acceptLanguage: "pt-BR"]), body: ByteBuffer(string: #"{"title": 5, "content": "x"}"#)
            ) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.json()["errors"] as? [String: [String]] == ["title": ["deve ser um texto"]])
            }
            try await client.execute(uri: "/api/v1/posts", method: .post, headers: json.merging([.acceptLanguage: "zh-CN"]), body: ByteBuffer(string: "{")) { response in
                #expect(response.status == .badRequest)
                #expect((response.json()["error"] as? String)?.hasPrefix("正文不是有效的 JSON：应为 {") == true)
            }
            try await client.execute(uri: "/api/v1/posts?page=0", method: .get, headers: [.acceptLanguage: "pt"]) { response in
                #expect(response.status == .badRequest)
                #expect((response.json()["error"] as? String)?.hasPrefix("page deve ser um número inteiro de 1 a") == true)
            }
            try await client.execute(uri: "/api/v1/posts", method: .put, headers: json.merging([.acceptLanguage: "zh"]), body: ByteBuffer(string: "{}")) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.json()["error"] as? String == "/api/v1/posts 不接受 PUT，只接受 GET, HEAD, POST。")
            }
        }
    }

    @Test func theAccountsLanguageWinsOverTheBrowsersAndTheAPISetsIt() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let (token, _) = try await signIn(client)
            try await client.execute(uri: "/api/v1/me", method: .get, headers: bearer(token)) { response in
                #expect(response.text.contains(#""locale":null"#))
            }
            try await client.execute(uri: "/api/v1/me", method: .patch, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: #"{"locale": "zh"}"#)) { response in
                #expect(response.status == .ok)
                #expect(response.text.contains(#""locale":"zh-Hans""#))
            }
            try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token).merging([.acceptLanguage: "pt-BR"])) { response in
                #expect(response.headers[.contentLanguage] == "zh-Hans")
                #expect(response.text.contains("<h1>你的账户</h1>"))
                #expect(response.text.contains(#"<option value="zh-Hans" lang="zh-Hans" selected>简体中文</option>"#))
            }
            // A language Foyer does not speak is a 422 naming the field; the setting stays.
            try await client.execute(uri: "/api/v1/me", method: .patch, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: #"{"locale": "tlh"}"#)) { response in
                #expect(response.status == .unprocessableContent)
                #expect(response.text.contains(#""locale""#))
                // Said in the account's language, though the refusal is written outside authentication.
                #expect(response.headers[.contentLanguage] == "zh-Hans")
            }
            // "" goes back to the browser's language.
            try await client.execute(uri: "/api/v1/me", method: .patch, headers: bearer(token).merging(jsonHeaders), body: ByteBuffer(string: #"{"locale": ""}"#)) { response in
                #expect(response.text.contains(#""locale":null"#))
            }
            try await client.execute(uri: "/account", method: .get, headers: cookieHeader(token).merging([.acceptLanguage: "pt-BR"])) { response in
                #expect(response.text.contains("<h1>Sua conta</h1>"))
            }
        }
    }

    @Test func theAccountPagesLanguageFormSavesIt() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            let session = try await browserSession(client)
            let body = formBody([("_method", "patch"), ("authenticity_token", session.csrf), ("locale", "pt-BR")])
            try await client.execute(uri: "/account/language", method: .post, headers: session.headers, body: body) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/account")
                #expect(response.headers[values: .setCookie].contains { $0.hasPrefix("foyer_flash=language-changed") })
            }
            var headers = session.headers
            headers[.cookie] = (headers[.cookie] ?? "") + "; foyer_flash=language-changed"
            try await client.execute(uri: "/account", method: .get, headers: headers) { response in
                #expect(response.text.contains("Seu idioma foi salvo."))
                #expect(response.text.contains(#"<option value="pt-BR" lang="pt-BR" selected>Português (Brasil)</option>"#))
            }
        }
    }
}
