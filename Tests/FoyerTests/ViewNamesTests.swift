import Foundation
import Mustache
import Testing

@testable import Foyer

/// Views that name their values for templates (`MustacheParent`) answer every name as `Mirror` would, which is how
/// swift-mustache read them before: each property by its own name, an optional that holds nothing as no value at
/// all (so the name is looked for further out), and nothing for a name that is no property. Each view here has
/// every optional filled, so that a name missing from its `child(named:)` shows.
@Suite struct ViewNamesTests {
    static func expectNamesAsMirrorReadsThem(_ view: some MustacheParent, sourceLocation: SourceLocation = #_sourceLocation) {
        let children = Mirror(reflecting: view).children
        #expect(!children.isEmpty, sourceLocation: sourceLocation)
        for child in children {
            guard let label = child.label else { continue }
            let mirrored = Self.unwrapped(child.value)
            let named = view.child(named: label)
            #expect(named.map { String(describing: $0) } == mirrored.map { String(describing: $0) }, "\(type(of: view)).\(label)", sourceLocation: sourceLocation)
        }
        #expect(view.child(named: "noSuchName") == nil, sourceLocation: sourceLocation)
    }

    /// What swift-mustache's Mirror lookup gives for a value: an optional's contents, or nothing.
    static func unwrapped(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first?.value
    }

    @Test func postViewsNameEachProperty() throws {
        let english = try #require(Languages.shipped?.language(tag: "en"))
        let time = ReaderTime(language: english)
        var post = Post(id: 7, title: "A title", content: "Some *words*", authorId: 3, createdAt: Date(timeIntervalSince1970: 1_000), updatedAt: Date(timeIntervalSince1970: 2_000))
        post.hidden = .held
        var published = PublishedPost(post: post, author: .init(id: 3, name: "Ada"))
        published.picture = Picture(id: "abc", alt: "A cat", width: 1600, height: 1200, thumbnailWidth: 400, thumbnailHeight: 300)
        Self.expectNamesAsMirrorReadsThem(PostRowView(published, time: time))
        Self.expectNamesAsMirrorReadsThem(PostContentView(published, time: time))
        Self.expectNamesAsMirrorReadsThem(PictureView(try #require(published.picture), lazy: true))
        Self.expectNamesAsMirrorReadsThem(PostChangedNoticeView(published, time: time))
        Self.expectNamesAsMirrorReadsThem(time.view(of: post.createdAt))
        let field = FormField("title", value: "A title", errors: ["title": [Phrase("errors.blank")]], in: english)
        Self.expectNamesAsMirrorReadsThem(field)
        Self.expectNamesAsMirrorReadsThem(
            PostFormView(
                action: "/posts/7", editing: true, cancel: "/posts/7", title: field, content: field, picture: field, alt: field,
                current: published.picture.map { PictureView($0, lazy: false) }, version: 2, changedNoticeID: "post_7_changed"
            )
        )
    }

    @Test func taskViewsNameEachProperty() throws {
        let english = try #require(Languages.shipped?.language(tag: "en"))
        let task = TaskView(TaskItem(id: "1", version: 3, title: "Write", description: "The note", status: "ASSIGNED"), in: english)
        Self.expectNamesAsMirrorReadsThem(task)
        Self.expectNamesAsMirrorReadsThem(try #require(task.statuses.first))
    }

    /// A name an optional answers with nothing goes on to the view around it, as with `Mirror`.
    @Test func anEmptyOptionalLeavesTheNameToTheViewAroundIt() throws {
        let english = try #require(Languages.shipped?.language(tag: "en"))
        let post = Post(id: 7, title: "A title", content: "Words", authorId: 3, createdAt: Date(), updatedAt: Date())
        let content = PostContentView(PublishedPost(post: post, author: .init(id: 3, name: "Ada")), time: ReaderTime(language: english))
        #expect(content.child(named: "hiddenNotice") == nil)
        let template = try MustacheTemplate(string: "{{#post}}{{hiddenNotice}}{{/post}}")
        #expect(template.render(["post": content, "hiddenNotice": "outer"]) == "outer")
    }
}
