/// `<turbo-stream>` elements, as turbo-rails writes them. Targets are our own DOM ids; templates are HTML
/// already rendered (and escaped) by the views.
enum TurboStream {
    static let contentType = "text/vnd.turbo-stream.html"

    static func append(_ target: String, _ html: String) -> String { element("append", target, html) }
    static func prepend(_ target: String, _ html: String) -> String { element("prepend", target, html) }
    static func replace(_ target: String, _ html: String) -> String { element("replace", target, html) }
    static func remove(_ target: String) -> String { element("remove", target, nil) }

    private static func element(_ action: String, _ target: String, _ html: String?) -> String {
        let open = #"<turbo-stream action="\#(action)" target="\#(HTML.escape(target))">"#
        guard let html else { return open + "</turbo-stream>" }
        return open + "<template>" + compact(html) + "</template></turbo-stream>"
    }

    /// Templates' indentation and blank lines, gone: a fragment goes to every open page, so each byte counts
    /// thousands of times. No view of ours keeps white space (no `pre`), so the page looks the same.
    static func compact(_ html: String) -> String {
        html.split(whereSeparator: \.isNewline).lazy
            .map { $0.drop(while: { $0 == " " || $0 == "\t" }) }
            .filter { !$0.isEmpty }
            .joined(separator: "\n")
    }

    /// Replaces a page's live frame with one that loads the page again: what open pages get when they missed
    /// events. `src="#"` is the page's own URL whatever page it is, so every subscriber gets the same bytes, and
    /// Turbo swaps in the frame of that name from the fresh page. `data-live-reload` tells `Public/live.js` to keep
    /// the events that arrive while the frame loads and apply them again once it has: the fresh page may have been
    /// read before them, and an event whose target is not on the page yet does nothing.
    static func reloadFrame(_ frame: String) -> String {
        replace(frame, ##"<turbo-frame id="\##(HTML.escape(frame))" src="#" target="_top" data-live-reload></turbo-frame>"##)
    }
}
