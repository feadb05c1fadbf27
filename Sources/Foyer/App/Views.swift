import Crypto
import Foundation
import FoyerServer
import HTTPTypes
import Hummingbird
import Mustache
import NIOConcurrencyHelpers
import NIOCore

/// Mustache templates from Templates/, loaded once at start, one copy per language (`TemplateWords`). Page
/// templates render a page's body; the layout every page shares is compiled once at start (see CompiledLayout), so
/// wrapping a body costs a few appends.
public struct Views: Sendable {
    let languages: Languages
    private let byLanguage: ByLanguage
    /// Tells these views from others: a digest of the templates, their settings and the catalogs.
    let fingerprint: String
    /// Pages load the offline script (which registers the service worker) and say whose they are to it.
    let offline: Bool
    /// For bodies rendered per request and sent gzipped (`page(body:…)`).
    private let deflaters = PieceDeflaters(level: CompressionMiddleware.dynamicLevel, capacity: 2 * System.coreCount)

    /// What one language's pages are made from.
    private struct InLanguage: Sendable {
        let library: MustacheLibrary
        let layout: CompiledLayout
        /// Every page's headers: its type, its language, and its Content-Security-Policy (which allows Turbo's origin).
        let pageHeaders: HTTPFields
    }

    /// Each language's compiled templates, made the first time a page in it is asked for. Start-up compiles the
    /// default language's, which checks every template and every key (the catalogs hold the same keys, checked
    /// too); a language nobody reads costs neither start-up time nor memory.
    private final class ByLanguage: Sendable {
        let templates: [String: String]
        let turboScriptURL: String
        let offline: Bool
        private let compiled: NIOLockedValueBox<[InLanguage?]>

        init(templates: [String: String], turboScriptURL: String, offline: Bool, languages: Languages) throws {
            (self.templates, self.turboScriptURL, self.offline) = (templates, turboScriptURL, offline)
            var compiled = [InLanguage?](repeating: nil, count: languages.all.count)
            compiled[languages.fallback.index] = try Self.compile(templates, turboScriptURL: turboScriptURL, offline: offline, in: languages.fallback)
            self.compiled = NIOLockedValueBox(compiled)
            // What could still fail later is a translation's own markup: each `_html` message a template says is
            // parsed in every language now.
            let htmlKeys = Set(templates.values.flatMap(TemplateWords.keys).filter { $0.hasSuffix("_html") })
            for language in languages.all where language !== languages.fallback {
                for key in htmlKeys {
                    guard case .text(let message) = language.catalog.messages[key] else { continue }
                    do { _ = try MustacheTemplate(string: message) } catch {
                        throw StartupError("\(language.tag).po: \(key) is not well-formed Mustache: \(error)")
                    }
                }
            }
        }

        subscript(language: Language) -> InLanguage {
            if let ready = compiled.withLockedValue({ $0[language.index] }) { return ready }
            // The default language compiled every template with the same keys; a failure here is a bug.
            let made = try! Self.compile(templates, turboScriptURL: turboScriptURL, offline: offline, in: language)
            return compiled.withLockedValue { compiled in
                if let ready = compiled[language.index] { return ready }
                compiled[language.index] = made
                return made
            }
        }

        private static func compile(_ templates: [String: String], turboScriptURL: String, offline: Bool, in language: Language) throws -> InLanguage {
            let translated = try templates.map { name, template in (name, try TemplateWords.translate(template, named: name, in: language)) }
            // Mustache's parser measures what is left of the template at every tag, so a template costs about the
            // square of its length (a third of start-up went to it): they are parsed side by side, one per core.
            let parsed = NIOLockedValueBox([Result<MustacheTemplate, any Error>?](repeating: nil, count: translated.count))
            let escaping = HTMLEscapedByBytes.pragma
            DispatchQueue.concurrentPerform(iterations: translated.count) { index in
                // On the template's first line: its line numbers stay those of the file.
                let template = Result { try MustacheTemplate(string: escaping + translated[index].1) }
                parsed.withLockedValue { $0[index] = template }
            }
            var library = MustacheLibrary()
            for (index, template) in parsed.withLockedValue({ $0 }).enumerated() {
                let name = translated[index].0
                do {
                    library.register(try template!.get(), named: name)
                } catch let error as MustacheTemplate.ParserError {
                    throw StartupError("Templates/\(name).mustache: \(error.error) at line \(error.context.lineNumber)")
                }
            }
            let layout = try CompiledLayout(library: &library, turboScriptURL: turboScriptURL, offline: offline, language: language)
            let pageHeaders = HTTPFields(
                [
                    HTTPField(name: .contentType, value: "text/html; charset=utf-8"), HTTPField(name: .contentLanguage, value: language.tag),
                    // Accept-Encoding as CompressionMiddleware would add it to every page.
                    HTTPField(name: .vary, value: "User-Agent, Accept-Language, Accept-Encoding"),
                ] + SecurityHeaderFields.onPages(turboScriptURL: turboScriptURL)
            )
            return InLanguage(library: library, layout: layout, pageHeaders: pageHeaders)
        }
    }

    init(directory: String, turboScriptURL: String, offline: Bool, languages: Languages) throws {
        self.offline = offline
        self.languages = languages
        let templates = try Self.templates(in: directory)
        for required in ["layout", "errors/show", "sessions/new"] where templates[required] == nil {
            throw StartupError("Templates/\(required).mustache is missing from \(directory)")
        }
        // The same templates, settings and catalogs compile to the same views: a process that builds several
        // applications (the tests build hundreds) compiles them once.
        var digest = SHA256()
        for (name, template) in templates.sorted(by: { $0.key < $1.key }) { digest.update(data: Array((name + "\u{0}" + template + "\u{0}").utf8)) }
        digest.update(data: Array("\(turboScriptURL)\u{0}\(offline)\u{0}".utf8))
        for language in languages.all { digest.update(data: Array("\(language.tag):\(language.catalog.fingerprint)\u{0}".utf8)) }
        digest.update(data: Array(languages.fallback.tag.utf8))
        let key = digest.finalize().hexString
        fingerprint = key
        let compilation = Self.compilations.withLockedValue { compilations in
            if let started = compilations[key] { return started }
            let new = Compilation<ByLanguage>()
            compilations[key] = new
            return new
        }
        byLanguage = try compilation.compiled {
            try ByLanguage(templates: templates, turboScriptURL: turboScriptURL, offline: offline, languages: languages)
        }
    }

    /// Each set of templates, settings and catalogs, compiled once per process.
    private static let compilations = NIOLockedValueBox([String: Compilation<ByLanguage>]())

    /// Starts compiling, on another thread, the views `serve` will most likely ask for: those `PageOptions` gives
    /// from the environment alone. Parsing the command line takes one core about 15 ms at the start of start-up, and
    /// compiling the templates is start-up's largest part. A wrong guess costs only that core's time: the configured
    /// views are compiled as they would have been.
    static func compileAhead(environment: [String: String]) {
        DispatchQueue.global(qos: .userInitiated).async {
            let guess = PageOptions.fromEnvironment(environment)
            _ = try? Views(
                directory: guess.templatesDirectory, turboScriptURL: guess.turboScriptURL, offline: guess.offline,
                languages: try Languages.bundled(defaultTag: guess.defaultLocale)
            )
        }
    }

    /// Every `.mustache` file under `directory`, by its name there without the extension (`posts/index`).
    static func templates(in directory: String) throws -> [String: String] {
        let root = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        guard let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else {
            throw StartupError("Templates could not be read from \(directory)")
        }
        var templates: [String: String] = [:]
        for case let file as URL in files where file.pathExtension == "mustache" {
            let path = file.standardizedFileURL.path
            let name = String(path.dropFirst(root.path.count).drop { $0 == "/" }.dropLast(".mustache".count))
            templates[name] = try String(contentsOf: file, encoding: .utf8)
        }
        return templates
    }

    /// The language a page for this request is written in: the account's, else the browser's.
    func language(for request: Request, context: some CallerContext) -> Language {
        context.reader.language { accountLocale in
            languages.choose(for: request, locale: context.caller?.user.locale ?? accountLocale)
        }
    }

    /// The reader's clock and words for times, for a request.
    func readerTime(_ request: Request, context: some CallerContext) -> ReaderTime {
        ReaderTime(request, language: language(for: request, context: context))
    }

    /// An HTML page: `template` renders the body from `values`, which may use `csrf_token` and `current_user`
    /// like the layout does. `values["title"]` names the page (a `Phrase`, or words already said);
    /// `values["form_page"]` keeps it out of Turbo's snapshot cache (a preview of a form takes typing that the real
    /// page then throws away).
    func page(
        _ template: String, _ values: [String: Any], request: Request, context: some CallerContext,
        status: HTTPResponse.Status = .ok
    ) -> Response {
        let language = language(for: request, context: context)
        var values = values
        if let identity = context.caller {
            values["csrf_token"] = identity.session?.csrfToken ?? ""
            values["current_user"] = ["name": identity.user.name]
        }
        let title = (values["title"] as? Phrase).map(language.say) ?? values["title"] as? String ?? "Foyer"
        values["title"] = title
        return page(
            body: render(template, values, in: language), title: title, formPage: values["form_page"] as? Bool ?? false,
            request: request, context: context, status: status, keepsFlash: template == HistoricalLocation.template, language: language
        )
    }

    /// A page around a body already rendered in `language`. It shows the request's flash notice, and spends it,
    /// unless `keepsFlash` (a page nobody sees, which a native shell answers by reloading the one that should).
    /// A client that takes gzip gets it here rather than from `CompressionMiddleware`: only the body is deflated
    /// for the request, the layout's text was deflated at start.
    func page(
        body: String, title: String, formPage: Bool = false, request: Request, context: some CallerContext,
        status: HTTPResponse.Status = .ok, keepsFlash: Bool = false, language: Language
    ) -> Response {
        page(
            body: body, deflated: { try deflaters.piece(body) }, title: title, formPage: formPage, request: request, context: context,
            status: status, keepsFlash: keepsFlash, language: language
        )
    }

    /// A page around a body kept for many requests (the posts list), whose deflated form is kept with it: a page
    /// sent gzipped then costs what the uncompressed one does.
    func page(body: RenderedBody, title: String, request: Request, context: some CallerContext, language: Language) -> Response {
        page(
            body: body.html, deflated: body.deflatedPiece, title: title, formPage: false, request: request, context: context,
            status: .ok, keepsFlash: false, language: language
        )
    }

    /// `deflated` is asked for only when the client takes gzip; should it fail, the page goes out plain.
    private func page(
        body: String, deflated: () throws -> DeflatedPiece, title: String, formPage: Bool, request: Request, context: some CallerContext,
        status: HTTPResponse.Status, keepsFlash: Bool, language: Language
    ) -> Response {
        let flash = keepsFlash ? nil : Flash(request)
        let notice = flash.map { language.say($0.phrase) } ?? ""
        let inLanguage = byLanguage[language]
        let (identity, native) = (context.caller, request.isNativeShell)
        let gzipped = Self.takesGzip(request) ? try? deflated() : nil
        let html = if let gzipped {
            inLanguage.layout.renderGzip(body: gzipped, title: title, identity: identity, native: native, formPage: formPage, flash: notice)
        } else {
            inLanguage.layout.render(body: body, title: title, identity: identity, native: native, formPage: formPage, flash: notice)
        }
        var response = Response(status: status, headers: inLanguage.pageHeaders, body: .init(byteBuffer: html))
        if gzipped != nil { response.headers[.contentEncoding] = "gzip" }
        if flash != nil { response.setCookie(Flash.spent) }
        if offline { response.headers[.offlineOwner] = OfflineOwner.name(of: context.caller) }
        return response
    }

    /// As `CompressionMiddleware` decides for other answers (a page is always over its minimum size).
    private static func takesGzip(_ request: Request) -> Bool {
        request.method != .head && CompressionMiddleware.acceptsGzip(request.headers[values: .acceptEncoding])
    }

    /// A whole page for nobody in particular: the edge's refusals (made once, before any request exists) and the
    /// offline page. `context` is a typed view or, in older views, a dictionary.
    func standalonePage(_ template: String, _ context: Any, title: String, in language: Language) -> ByteBuffer {
        byLanguage[language].layout.render(
            body: render(template, context, in: language), title: title, identity: nil, native: false, formPage: false, flash: ""
        )
    }

    /// Every page's headers in `language`.
    func pageHeaders(in language: Language) -> HTTPFields { byLanguage[language].pageHeaders }

    /// What a page's headers say beyond its type and language: its Content-Security-Policy and the like.
    var pageSecurityFields: [HTTPField] {
        byLanguage[languages.fallback].pageHeaders.filter { $0.name != .contentType && $0.name != .vary && $0.name != .contentLanguage }
    }

    /// Renders a template to a string, for bodies that are cached before they are wrapped and for live fragments.
    /// `context` is a typed view (a struct whose property names the template uses) or, in older views, a dictionary.
    func render(_ template: String, _ context: Any, in language: Language) -> String {
        guard let html = byLanguage[language].library.render(context, withTemplate: template) else {
            preconditionFailure("template \(template) is not loaded")
        }
        return html
    }
}

/// `layout.mustache`, rendered once at start for each combination of its sections (signed in, native shell,
/// form page) with marker strings where the per-request values go, then cut at the markers. Rendering a page is
/// then joining the pieces with the escaped values: no template walk per request. The template stays the one
/// source of the layout's HTML.
struct CompiledLayout: Sendable {
    enum Slot: String, CaseIterable, Sendable {
        case title, csrfToken = "csrf", name, body, flash
    }

    enum Piece: Sendable {
        /// Its text, and the same deflated, for pages sent compressed (`renderGzip`).
        case literal(String, DeflatedPiece)
        case slot(Slot)
    }

    /// Never in a template or in HTML escaping's output, so it can only come from our own markers.
    private static let marker: Character = "\u{1}"
    private let variants: [Int: [Piece]]

    init(library: inout MustacheLibrary, turboScriptURL: String, offline: Bool, language: Language) throws {
        let probe = "__layout_probe"
        let deflater = try PieceDeflater(level: RenderedBody.level)
        try library.register("{{<layout}}{{$body}}\(Self.marker)body\(Self.marker){{/body}}{{/layout}}", named: probe)
        var variants: [Int: [Piece]] = [:]
        for signedIn in [false, true] {
            for native in [false, true] {
                for formPage in [false, true] {
                    var values: [String: Any] = [
                        "title": Self.markerFor(.title), "turbo_url": turboScriptURL, "native": native, "form_page": formPage,
                        "flash": Self.markerFor(.flash), "offline": offline, "lang": language.tag,
                        "script_words": language.scriptWords,
                    ]
                    if signedIn {
                        values["csrf_token"] = Self.markerFor(.csrfToken)
                        values["current_user"] = ["name": Self.markerFor(.name)]
                    }
                    guard let rendered = library.render(values, withTemplate: probe) else {
                        throw StartupError("Templates/layout.mustache could not be rendered")
                    }
                    let pieces = try Self.pieces(of: rendered, deflater: deflater)
                    guard pieces.filter({ if case .slot(.body) = $0 { true } else { false } }).count == 1 else {
                        throw StartupError("Templates/layout.mustache must have exactly one {{$body}}{{/body}} block")
                    }
                    variants[Self.key(signedIn: signedIn, native: native, formPage: formPage)] = pieces
                }
            }
        }
        self.variants = variants
    }

    func render(body: String, title: String, identity: Identity?, native: Bool, formPage: Bool, flash: String) -> ByteBuffer {
        let pieces = variants[Self.key(signedIn: identity != nil, native: native, formPage: formPage)]!
        var html = ByteBuffer()
        html.reserveCapacity(body.utf8.count + 2048)
        for piece in pieces {
            switch piece {
            case .literal(let text, _): html.writeString(text)
            case .slot(.body): html.writeString(body)
            case .slot(let slot): Self.write(slot, title: title, identity: identity, flash: flash, into: &html)
            }
        }
        return html
    }

    /// The same page as one gzip member: the layout's text and the body were deflated ahead, and the per-request
    /// values go in as they are (stored), so no compressor runs for the request.
    func renderGzip(body: DeflatedPiece, title: String, identity: Identity?, native: Bool, formPage: Bool, flash: String) -> ByteBuffer {
        let pieces = variants[Self.key(signedIn: identity != nil, native: native, formPage: formPage)]!
        var member = GzipMember(capacity: body.deflated.readableBytes + 1024)
        var value = ByteBuffer()
        for piece in pieces {
            switch piece {
            case .literal(_, let deflated): member.append(deflated)
            case .slot(.body): member.append(body)
            case .slot(let slot):
                value.clear()
                Self.write(slot, title: title, identity: identity, flash: flash, into: &value)
                member.appendStored(value)
            }
        }
        return member.finish()
    }

    /// A per-request value, escaped.
    private static func write(_ slot: Slot, title: String, identity: Identity?, flash: String, into html: inout ByteBuffer) {
        switch slot {
        case .body: preconditionFailure("the body is written by the caller")
        case .title: HTML.write(title, escapedInto: &html)
        case .csrfToken: HTML.write(identity?.session?.csrfToken ?? "", escapedInto: &html)
        case .name: HTML.write(identity?.user.name ?? "", escapedInto: &html)
        case .flash: HTML.write(flash, escapedInto: &html)
        }
    }

    private static func markerFor(_ slot: Slot) -> String { "\(marker)\(slot.rawValue)\(marker)" }

    private static func key(signedIn: Bool, native: Bool, formPage: Bool) -> Int {
        (signedIn ? 1 : 0) | (native ? 2 : 0) | (formPage ? 4 : 0)
    }

    /// Text between markers alternates: literal, slot name, literal, …
    private static func pieces(of rendered: String, deflater: PieceDeflater) throws -> [Piece] {
        try rendered.split(separator: marker, omittingEmptySubsequences: false).enumerated().compactMap { index, part in
            if index.isMultiple(of: 2) { return part.isEmpty ? nil : try .literal(String(part), deflater.piece(String(part))) }
            guard let slot = Slot(rawValue: String(part)) else {
                throw StartupError("Templates/layout.mustache: unexpected marker \(part)")
            }
            return .slot(slot)
        }
    }
}

extension Views {
    /// How pages show a time: "2026-11-21 16:34:52 UTC".
    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601).replacingOccurrences(of: "T", with: " ").replacingOccurrences(of: "Z", with: " UTC")
    }
}

/// Starts compiling the templates `serve` will most likely use on another thread (`Views.compileAhead`), for the
/// reason the catalogs are read ahead (`readLanguageCatalogsAhead`).
public func compileViewsAhead() { Views.compileAhead(environment: ProcessInfo.processInfo.environment) }

/// One set of views compiled by whoever asks first; whoever asks meanwhile waits for it (start-up's guess,
/// `Views.compileAhead`, is usually still at it when the configured views are made). A failure is kept by nobody:
/// the next to ask compiles again, and says why.
final class Compilation<Made: Sendable>: Sendable {
    private let made = NIOLockedValueBox<Made?>(nil)

    func compiled(_ compile: () throws -> Made) throws -> Made {
        try made.withLockedValue { made in
            if let made { return made }
            let new = try compile()
            made = new
            return new
        }
    }
}
