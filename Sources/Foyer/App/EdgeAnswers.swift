import Foundation
import FoyerServer
import HTTPTypes
import NIOCore
import NIOHTTP1

extension EdgeAnswer {
    /// What the edge answers `refusal` with: the error page, or JSON when the request line asked for it, in the
    /// default language (made before any request is read), with every header a page of Foyer's carries.
    static func refusing(_ refusal: EdgeRefusal, views: Views) -> EdgeAnswer {
        let status = refusal.status
        var body = ByteBuffer()
        var head = HTTPResponseHead(version: .http1_1, status: .init(statusCode: status.code, reasonPhrase: status.reasonPhrase))
        let language = views.languages.fallback
        let message = refusal.message(in: language)
        if refusal.json {
            head.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
            body.writeBytes(try! JSONSerialization.data(withJSONObject: ["error": message], options: [.withoutEscapingSlashes]))
        } else {
            head.headers.add(name: "Content-Type", value: "text/html; charset=utf-8")
            let title = language.text("errors.status", ["status": "\(status.code)"])
            body = views.standalonePage("errors/show", ["title": title, "status": status.code, "message": message], title: title, in: language)
        }
        head.headers.add(name: "Content-Language", value: language.tag)
        head.headers.add(name: "Content-Length", value: String(body.readableBytes))
        head.headers.add(name: "Connection", value: "close")
        head.headers.add(name: "Cache-Control", value: "no-store")
        for field in SecurityHeaderFields.everywhere { head.headers.add(name: field.name.rawName, value: field.value) }
        if !refusal.json {
            for field in views.pageSecurityFields { head.headers.add(name: field.name.rawName, value: field.value) }
        }
        return EdgeAnswer(head: head, body: body)
    }
}

extension EdgeRefusal {
    /// What the refused client is told, in `language`.
    func message(in language: Language) -> String {
        let kibibytes = ["kib": "\(EdgeSettings.maximumHeadBytes / 1024)", "fields": "\(EdgeSettings.maximumHeaderCount)"]
        return switch self {
        case .requestTimeout: language.text("edge.timeout")
        case .uriTooLong: language.text("edge.uri_too_long", ["kib": "\(EdgeSettings.maximumRequestLineBytes / 1024)"])
        case .headTooLarge: language.text("edge.head_too_large", kibibytes)
        case .tooManyHeaders: language.text("edge.too_many_headers", kibibytes)
        case .trailersTooLarge: language.text("edge.trailers_too_large", kibibytes)
        case .malformed: language.text("edge.malformed")
        case .missingHost: language.text("edge.missing_host")
        }
    }
}
