import FoyerServer
import HTTPTypes
import Hummingbird

extension Request {
    /// Turbo asks for a stream answer on form submissions (`Accept: text/vnd.turbo-stream.html, text/html, …`).
    /// Native shells keep their redirects: those are what close a modal or pop a screen.
    var wantsTurboStream: Bool {
        guard !isNativeShell, let accept = headers.value(.accept) else { return false }
        return accept.contains(TurboStream.contentType)
    }
}

extension Response {
    /// `<turbo-stream>` elements that change the page in place, instead of a redirect.
    static func turboStream(_ html: String) -> Response {
        Response(
            status: .ok, headers: [.contentType: "\(TurboStream.contentType); charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: html))
        )
    }
}
