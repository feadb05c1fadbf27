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

    @Test func pageViewsNameEachProperty() throws {
        let english = try #require(Languages.shipped?.language(tag: "en"))
        let time = ReaderTime(language: english).view(of: Date(timeIntervalSince1970: 1_000))
        let field = FormField("email", value: "ada@example.com", errors: ["email": [Phrase("errors.blank")]], in: english)

        let button = SignInForm.SignInView.ProviderButton(id: "keycloak-sign-in", label: "Keycloak", start: "/auth/keycloak")
        Self.expectNamesAsMirrorReadsThem(button)
        Self.expectNamesAsMirrorReadsThem(
            SignInForm.SignInView(
                email: "ada@example.com", returnTo: "/posts", message: "Wrong password", csrfToken: "token", providers: [button],
                hasProviders: true, passwordProvider: "Keycloak", signUpPath: "/sign_up"
            )
        )
        Self.expectNamesAsMirrorReadsThem(
            SignUpController.SignUpView(
                name: field, email: field, password: field, acceptTerms: field, termsAccepted: true, errors: ["Email can't be blank"],
                hasErrors: true, csrfToken: "token", returnTo: "/posts", signInPath: "/sign_in"
            )
        )

        let device = AccountController.AccountView.Device(
            id: "7", name: "Chrome on macOS", userAgent: "Mozilla/5.0", ipAddress: "127.0.0.1", signedIn: time, lastSeen: time, current: true,
            boundToDeviceKey: true
        )
        let provider = AccountController.AccountView.Provider(id: "keycloak-claims", displayName: "Keycloak", claims: [["name": "sub", "value": "1"]], ownToken: true)
        let passkey = AccountController.PasskeyView(id: "abc", name: "iPhone", created: time, lastUsed: time, synced: true)
        let settings = AccountController.Settings(
            name: field, emailConfirmed: true, hasLocalPassword: true, newEmail: field, pendingEmail: "new@example.com",
            emailCurrentPassword: field, currentPassword: field, newPassword: field
        )
        let languages = try #require(Languages.shipped)
        let language = AccountController.LanguageChoice(languages: languages, chosen: "en")
        Self.expectNamesAsMirrorReadsThem(device)
        Self.expectNamesAsMirrorReadsThem(provider)
        Self.expectNamesAsMirrorReadsThem(passkey)
        Self.expectNamesAsMirrorReadsThem(settings)
        Self.expectNamesAsMirrorReadsThem(language)
        Self.expectNamesAsMirrorReadsThem(try #require(language.options.first))
        Self.expectNamesAsMirrorReadsThem(
            AccountController.AccountView(
                email: "ada@example.com", devices: [device], hasOtherDevices: true, provider: provider, settings: settings, moderates: true,
                passkeys: [passkey], mayAddPasskey: true, language: language
            )
        )

        let choice = ModerationController.QueueView.Choice(value: "hide", label: "Hide", style: "destructive")
        let entry = ModerationController.QueueView.Entry(
            reportId: 3, subject: "A post", postPath: "/posts/7", keptTitle: "A title", keptContent: "Words", keptPictureAlt: "A cat",
            keptPicturePath: "/pictures/abc", state: "held", waiting: time, reporterCount: 2, reportedBy: "2 people", reasons: "Spam",
            comments: ["Again"], actions: [choice]
        )
        Self.expectNamesAsMirrorReadsThem(choice)
        Self.expectNamesAsMirrorReadsThem(entry)
        Self.expectNamesAsMirrorReadsThem(ModerationController.QueueView(resolved: false, entries: [entry], isEmpty: false, admin: true, roles: [choice]))

        let reason = ReportsController.ReportFormView.Choice(value: "spam", label: "Spam", checked: true)
        Self.expectNamesAsMirrorReadsThem(reason)
        Self.expectNamesAsMirrorReadsThem(
            ReportsController.ReportFormView(
                action: "/posts/7/report", cancel: "/posts/7", subject: "A post", reasons: [reason], comment: field, reasonError: "Choose one",
                message: "Not filed"
            )
        )

        let row = PostRowView(
            PublishedPost(post: Post(id: 7, title: "A title", content: "Words", authorId: 3, createdAt: Date(), updatedAt: Date()), author: .init(id: 3, name: "Ada")),
            time: ReaderTime(language: english)
        )
        Self.expectNamesAsMirrorReadsThem(ProfilesController.ProfileView(id: 3, name: "Ada", since: "2 days ago", posts: [row], hasPosts: true, canAct: true))

        let status = TaskFormView.Status(value: "OPEN", label: "Open", selected: true)
        Self.expectNamesAsMirrorReadsThem(status)
        Self.expectNamesAsMirrorReadsThem(
            TaskFormView(action: "/tasks/1", editing: true, version: 3, title: field, description: field, status: field, statuses: [status])
        )
    }

    @Test func rarerPageViewsNameEachProperty() async throws {
        let english = try #require(Languages.shipped?.language(tag: "en"))
        let time = ReaderTime(language: english).view(of: Date(timeIntervalSince1970: 1_000))
        let field = FormField("password", value: "", errors: ["password": [Phrase("errors.blank")]], in: english)

        let line = ModerationController.AuditView.Line(when: time, moderator: "Mo", action: "hide", target: "post 7", note: "spam")
        Self.expectNamesAsMirrorReadsThem(line)
        Self.expectNamesAsMirrorReadsThem(ModerationController.AuditView(lines: [line], isEmpty: false))
        let person = BlocksController.BlocksView.Person(id: 3, name: "Ada", since: time)
        Self.expectNamesAsMirrorReadsThem(person)
        Self.expectNamesAsMirrorReadsThem(BlocksController.BlocksView(people: [person], isEmpty: false))
        Self.expectNamesAsMirrorReadsThem(MailedLinksController.ConfirmView(email: "ada@example.com", name: "Ada", action: "/confirm", change: true))
        Self.expectNamesAsMirrorReadsThem(MailedLinksController.ResetView(action: "/password_resets/x", email: "ada@example.com", password: field))
        Self.expectNamesAsMirrorReadsThem(
            AccountSettingsController.DeletionView(
                email: "ada@example.com", posts: "your 3 posts", sessions: "2 sessions", devices: "1 device", hasLocalPassword: true, password: field
            )
        )
        let side = ConflictView.Side(title: "A title", detail: "Open", bodyHTML: "<p>Words</p>", note: "A cat")
        Self.expectNamesAsMirrorReadsThem(side)
        Self.expectNamesAsMirrorReadsThem(ConflictView(record: .post, savedBy: "Ada", savedAt: time, theirs: side, yours: side))

        // Accepted terms, read by a signed-in reader: every optional of the view filled.
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        var user = try await UserRepository(database: database, passwordHashCost: 4).create(email: "ada@example.com", password: "long enough")
        user.termsAcceptedAt = Date(timeIntervalSince1970: 2_000)
        let (session, token) = try await SessionRepository(database: database).create(for: user, userAgent: nil, ipAddress: nil)
        let terms = Terms(version: "abc", html: "<p>Be kind</p>", effectiveAt: Date(timeIntervalSince1970: 1_000), contactEmail: "help@example.com")
        let view = TermsController.TermsView(
            terms, identity: Identity(user: user, session: session, credential: .cookie, token: token), returnTo: "/posts/new", refusedWrite: true
        )
        #expect(view.acceptedOn != nil && view.csrfToken != nil && view.effective != nil)
        Self.expectNamesAsMirrorReadsThem(view)
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
