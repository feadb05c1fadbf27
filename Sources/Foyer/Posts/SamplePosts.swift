/// A few posts for a fresh embedded install, so the list, the pages and the API show something real at once.
enum SamplePosts {
    static let samples: [(title: String, content: String)] = [
        ("Welcome to Foyer", "Foyer serves these pages to browsers and to Hotwire Native apps alike.\n\nSign in, then write a post of your own: the form opens as a modal in a native shell."),
        ("How native sign-in works", "POST /api/v1/sessions with an email and a password.\nThe answer carries an X-Session-Token for native code and a cookie for the WebView: one session, two doors."),
        ("Path configuration", "Native shells load /configurations/ios_v1.json or android_v1.json at launch.\n\nRules decide which pages open as modals; change them on the server, no app release needed."),
        ("Posts as JSON", "GET /api/v1/posts lists these posts for native screens, newest first, twenty to a page, with a Link header to the next page."),
        ("Forms and Turbo", "A form that fails comes back with 422 and its messages; one that succeeds answers 303.\n\nTurbo Drive follows both without a full page load."),
    ]

    static func seed(into posts: PostRepository, author: User) async throws {
        guard try await posts.count() == 0 else { return }
        for sample in samples {
            _ = try await posts.create(PostChanges(title: sample.title, content: sample.content), author: author)
        }
    }
}
