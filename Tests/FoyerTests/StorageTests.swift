import Foundation
import GRDB
import Logging
import Testing

@testable import Foyer

/// Every repository on every store: the same calls must give the same answers on SQLite and on PostgreSQL.
@Suite struct StorageTests {
    static let kinds = TestStoreKind.allCases

    private func users(_ store: Store) -> UserRepository { UserRepository(store: store, passwordHashCost: 4) }

    @Test(arguments: kinds) func usersAreUniqueByEmailWhateverItsCaseAndSignInWithTheirPassword(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: " Ada@Example.com", password: "long enough")
        #expect(ada.id != nil && ada.email == "ada@example.com")
        await #expect(throws: UserError.self) { try await users(store).create(email: "ADA@example.com", password: "long enough too") }
        #expect(try await users(store).count() == 1)
        #expect(try await users(store).authenticate(email: "ADA@example.com", password: "long enough")?.id == ada.id)
        #expect(try await users(store).authenticate(email: "ada@example.com", password: "wrong one") == nil)
        #expect(try await users(store).authenticate(email: "nobody@example.com", password: "long enough") == nil)
    }

    @Test(arguments: kinds) func providerUsersAreFoundLinkedOrProvisioned(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let local = try await users(store).create(email: "ada@example.com", password: "long enough")
        let storage = store.userStorage
        func user(_ subject: String, _ email: String, at provider: String = "keycloak", newEmail: String? = nil, link: Bool) async throws -> User? {
            try await storage.providerUser(
                provider: provider, subject: subject, email: email, newEmail: newEmail, separateEmail: "\(subject)@\(provider).oidc.invalid",
                name: "User \(subject)", emailVerified: link
            ) { _, _ in link }
        }
        // Unverified: the local account is not linked.
        #expect(try await user("sub-1", "ada@example.com", link: false) == nil)
        let linked = try #require(try await user("sub-1", "ada@example.com", link: true))
        #expect(linked.id == local.id)
        #expect(try await storage.find(provider: "keycloak", subject: "sub-1")?.id == local.id)
        // Found by subject again; the email follows the provider's when it is free…
        let moved = try #require(try await user("sub-1", "ada@new.example", newEmail: "ada@new.example", link: false))
        #expect(moved.id == local.id && moved.email == "ada@new.example")
        #expect(try await storage.find(provider: "keycloak", subject: "sub-1")?.email == "ada@new.example")
        // …and stays when another account has it.
        _ = try await users(store).create(email: "bob@example.com", password: "long enough")
        let kept = try #require(try await user("sub-1", "bob@example.com", newEmail: "bob@example.com", link: false))
        #expect(kept.email == "ada@new.example")
        let provisioned = try #require(try await user("sub-2", "cy@example.com", link: false))
        #expect(provisioned.id != local.id && !provisioned.hasLocalPassword)
        // The same subject at another provider is someone else…
        #expect(try await storage.find(provider: "acme", subject: "sub-2") == nil)
        // …with the same email: linked when allowed, else a user of its own with an address of its own.
        let separate = try #require(try await user("sub-9", "cy@example.com", at: "acme", link: false))
        #expect(separate.id != provisioned.id && separate.email == "sub-9@acme.oidc.invalid")
        let joined = try #require(try await user("sub-7", "cy@example.com", at: "other", link: true))
        #expect(joined.id == provisioned.id)
    }

    @Test(arguments: kinds) func sessionsAreFoundByTokenListedRevokedAndPruned(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: "ada@example.com", password: "long enough")
        let ended = EndedSessions()
        let sessions = SessionRepository(store: store, lifetime: SessionLifetime(idleTimeout: 3600, lifetime: 86_400), ending: ended.hook)
        let (first, firstToken) = try await sessions.create(for: ada, userAgent: "Phone", ipAddress: "10.0.0.1")
        let (second, secondToken) = try await sessions.create(for: ada, userAgent: nil, ipAddress: nil)
        let found = try #require(try await sessions.find(token: firstToken))
        #expect(found.0.id == first.id && found.0.userAgent == "Phone" && found.1.email == "ada@example.com")
        #expect(try await sessions.find(token: "not a token") == nil)
        #expect(Set(try await sessions.list(userId: ada.id!).map(\.id)) == [first.id, second.id])

        #expect(try await sessions.revoke(id: first.id, userId: ada.id!))
        #expect(try await !sessions.revoke(id: first.id, userId: ada.id!), "revoked once")
        #expect(try await sessions.find(token: firstToken) == nil)
        #expect(try await sessions.list(userId: ada.id!).map(\.id) == [second.id])
        #expect(ended.ids == [first.id])

        // Idle past the timeout: pruned, with its devices' hook, and its token no longer works.
        #expect(try await sessions.prune(now: Date().addingTimeInterval(7200)) == 2)
        #expect(Set(ended.ids) == [first.id, second.id])
        #expect(try await sessions.find(token: secondToken, now: Date().addingTimeInterval(7200)) == nil)
    }

    /// SQLite reads a session by its columns' names, not through Codable: each column comes back as written.
    @Test(arguments: kinds) func aSessionIsReadBackAsItWasWritten(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: "ada@example.com", password: "long enough")
        let sessions = SessionRepository(store: store)
        let (written, _, cookieToken) = try await sessions.create(for: ada, userAgent: "App", ipAddress: "10.0.0.2", dpopThumbprint: "thumbprint")
        let read = try #require(try await sessions.list(userId: ada.id!).first)
        let texts: [String?] = [read.id, read.tokenHash, read.csrfToken, read.userAgent, read.ipAddress, read.dpopThumbprint, read.cookieTokenHash]
        #expect(texts == [written.id, written.tokenHash, written.csrfToken, "App", "10.0.0.2", "thumbprint", written.cookieTokenHash])
        #expect(read.cookieTokenHash == SessionRepository.hash(token: cookieToken))
        #expect(read.userId == ada.id && read.revokedAt == nil)
        #expect(abs(read.createdAt.timeIntervalSince(written.createdAt)) < 0.001 && abs(read.lastSeenAt.timeIntervalSince(written.lastSeenAt)) < 0.001)
    }

    /// A user is written through Codable and read by its columns' names: each field comes back as written.
    @Test func aUserIsReadBackAsItWasWritten() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let at = { (seconds: Double) in Date(timeIntervalSince1970: seconds) }
        var written = User(
            email: "ada@example.com", name: "Ada", passwordHash: "hash", createdAt: at(1_000), emailConfirmedAt: at(2_000), termsAcceptedAt: at(3_000)
        )
        (written.role, written.suspendedAt, written.vouchedAt, written.locale) = (.admin, at(4_000), at(5_000), "pt-BR")
        try await database.write { [written] db in var user = written; try user.insert(db) }
        let read = try #require(try await UserRepository(database: database, passwordHashCost: 4).storage.find(id: 1))
        #expect([read.email, read.name, read.passwordHash, read.locale] == ["ada@example.com", "Ada", "hash", "pt-BR"])
        #expect(read.id == 1 && read.role == .admin)
        #expect([read.createdAt, read.emailConfirmedAt, read.termsAcceptedAt, read.suspendedAt, read.vouchedAt] == [at(1_000), at(2_000), at(3_000), at(4_000), at(5_000)])
    }

    @Test(arguments: kinds) func postsArePagedNewestFirstWithTheirAuthors(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: "ada@example.com", password: "long enough")
        let changes = ChangeLog()
        let posts = PostRepository(store: store, blocks: Blocks(store: store)) { changes.append($0) }
        var made: [PublishedPost] = []
        for number in 1...5 {
            made.append(try await posts.create(PostChanges(title: "Post \(number)", content: "Body \(number)"), author: ada))
        }
        let generation = posts.generation.current
        let page = try await posts.storage.page(limit: 2, offset: 2, excluding: [])
        #expect(page.posts.map(\.post.title) == ["Post 3", "Post 2"] && page.total == 5)
        #expect(page.posts.allSatisfy { $0.author.name == "ada" }, "authors by name, never by address")
        #expect(try await posts.storage.page(limit: 2, offset: 10, excluding: []).total == 5, "past the end still counts")

        // The point read (a prepared statement on PostgreSQL, read by position): every field, its author, its times.
        let found = try #require(try await posts.find(id: made[2].id))
        #expect(found.post.id == made[2].id && found.post.title == "Post 3" && found.post.content == "Body 3")
        #expect(found.post.authorId == ada.id && found.author.id == ada.id && found.author.name == "ada")
        #expect(abs(found.post.createdAt.timeIntervalSince(made[2].post.createdAt)) < 0.001)
        #expect(abs(found.post.updatedAt.timeIntervalSince(made[2].post.updatedAt)) < 0.001)

        let updated = try await posts.update(made[0], with: PostChanges(title: "First, edited", content: nil))
        #expect(try await posts.find(id: made[0].id)?.post.title == "First, edited")
        #expect(try await posts.find(id: made[0].id)?.post.content == "Body 1")
        #expect(updated.post.updatedAt >= made[0].post.updatedAt)
        await #expect(throws: ValidationFailed.self) { try await posts.create(PostChanges(title: " ", content: nil), author: ada) }
        try await posts.delete(id: made[1].id)
        #expect(try await posts.find(id: made[1].id) == nil)
        #expect(try await posts.count() == 4)
        #expect(posts.generation.current > generation)
        #expect(changes.kinds == ["created", "created", "created", "created", "created", "updated", "deleted"])
    }

    @Test(arguments: kinds) func signInFailuresThrottleALoginAndARightPasswordClearsIt(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let throttle = SignInThrottle(store: store)
        let now = Date()
        for _ in 0..<SignInThrottle.perLogin {
            _ = try await throttle.begin(login: "Ada@example.com", clientIP: "10.0.0.1", now: now)
        }
        await #expect(throws: SignInThrottle.Throttled.self) { try await throttle.begin(login: "ada@example.com", clientIP: "10.0.0.2", now: now) }
        // Another login from the same client is not throttled yet; once its window passed, the login is free again.
        let other = try await throttle.begin(login: "bob@example.com", clientIP: "10.0.0.1", now: now)
        try await throttle.abandon(other)
        let later = now.addingTimeInterval(SignInThrottle.window + 1)
        let attempt = try await throttle.begin(login: "ada@example.com", clientIP: "10.0.0.1", now: later)
        try await throttle.succeeded(attempt, login: "ada@example.com")
        for _ in 0..<SignInThrottle.perLogin - 1 {
            _ = try await throttle.begin(login: "ada@example.com", clientIP: nil, now: later)
        }
        try await throttle.prune(now: later)
        _ = try await throttle.begin(login: "ada@example.com", clientIP: nil, now: later)
        await #expect(throws: SignInThrottle.Throttled.self) { try await throttle.begin(login: "ada@example.com", clientIP: nil, now: later) }
    }

    @Test(arguments: kinds) func keycloakTokensAndSignInAttemptsAreKeptPerSession(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: "ada@example.com", password: "long enough")
        _ = try await store.userStorage.providerUser(
            provider: "keycloak", subject: "ada-sub", email: "ada@example.com", newEmail: nil, separateEmail: "x@keycloak.invalid",
            name: "Ada", emailVerified: true
        ) { _, _ in true }
        let sessions = SessionRepository(store: store)
        let (session, _) = try await sessions.create(for: ada, userAgent: nil, ipAddress: nil)
        let storage = store.providerStorage
        let expires = Date(timeIntervalSince1970: 2_000_000_000)
        try await storage.save(ProviderTokenRecord(
            sessionId: session.id, accessToken: "a1", refreshToken: "r1", idToken: nil, accessExpiresAt: expires, keycloakSessionId: "sid-1",
            provider: "keycloak"
        ))
        try await storage.save(ProviderTokenRecord(
            sessionId: session.id, accessToken: "a2", refreshToken: "r2", idToken: "i2", accessExpiresAt: expires, keycloakSessionId: "sid-1",
            provider: "keycloak"
        ))
        let tokens = try #require(try await storage.tokens(ofSession: session.id))
        #expect(tokens.accessToken == "a2" && tokens.refreshToken == "r2" && tokens.idToken == "i2" && tokens.accessExpiresAt == expires)
        #expect(tokens.provider == "keycloak")
        #expect(try await storage.sessions(provider: "keycloak", providerSession: "sid-1", subject: "ada-sub").map(\.id) == [session.id])
        #expect(try await storage.sessions(provider: "keycloak", providerSession: "sid-1", subject: "someone-else").isEmpty)
        #expect(try await storage.sessions(provider: "acme", providerSession: "sid-1", subject: nil).isEmpty, "another provider's sid")
        #expect(try await storage.sessions(provider: "keycloak", providerSession: nil, subject: "ada-sub").map(\.userId) == [ada.id!])
        try await storage.deleteTokens(ofSession: session.id)
        #expect(try await storage.tokens(ofSession: session.id) == nil)

        let attempt = BrowserSignInAttempt(
            state: "state-1", codeVerifier: "verifier", nonce: "nonce", redirectUri: "http://127.0.0.1/cb", returnTo: "/tasks", createdAt: Date(),
            provider: "keycloak"
        )
        try await storage.insert(attempt, droppingOlderThan: Date().addingTimeInterval(-600))
        #expect(try await storage.take(state: "state-1")?.codeVerifier == "verifier")
        #expect(try await storage.take(state: "state-1") == nil, "used once")
    }

    /// On PostgreSQL only: one process owns a SQLite file, and there `exclusively` just runs (the refresh's own
    /// in-process dedupe keeps one session's refreshes apart).
    @Test func refreshesOfOneSessionOnTwoInstancesNeverOverlap() async throws {
        let store = try await Store.fresh(.postgres)
        defer { store.close() }
        // Two instances: two pools on one database.
        let other = try await Store.reopen(store)
        defer { other.close() }
        let running = RunningCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for instance in [store, other, store, other] {
                group.addTask {
                    try await instance.exclusively("keycloak refresh session-1", waitingUpTo: .seconds(20)) {
                        running.enter()
                        try await Task.sleep(for: .milliseconds(50))
                        running.leave()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(running.most == 1 && running.entered == 4, "all four ran, one at a time")
    }

    /// A refresh holds no connection while Keycloak answers: more sessions refreshing at once than the pool has
    /// connections all finish. (Holding one per refresh took them all, and every refresh then waited for another.)
    @Test(arguments: kinds) func moreSessionsRefreshingAtOnceThanThePoolHasConnectionsAllFinish(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let storage = store.providerStorage
        let finished = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<40 {
                group.addTask {
                    try await store.exclusively("keycloak refresh session-\(index)", waitingUpTo: .seconds(20)) {
                        _ = try await storage.tokens(ofSession: "session-\(index)")
                        try await Task.sleep(for: .milliseconds(300))
                        _ = try await storage.tokens(ofSession: "session-\(index)")
                        return 1
                    } ?? 0
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(finished == 40)
    }

    @Test(arguments: kinds) func offlineTaskCopiesAreKeptPerUserAndKey(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: "ada@example.com", password: "long enough")
        let copies = store.taskCopyStorage
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        try await copies.keep(Data("one".utf8), userId: ada.id!, key: "list", at: at)
        try await copies.keep(Data("two".utf8), userId: ada.id!, key: "list", at: at.addingTimeInterval(1))
        let copy = try #require(try await copies.copy(userId: ada.id!, key: "list"))
        #expect(copy.body == Data("two".utf8) && copy.cachedAt == at.addingTimeInterval(1))
        #expect(try await copies.copy(userId: ada.id!, key: "task:1") == nil)
        try await copies.drop(userId: ada.id!, key: "list")
        #expect(try await copies.copy(userId: ada.id!, key: "list") == nil)
    }

    @Test(arguments: kinds) func embeddedTasksKeepVersionsAndRefuseStaleUpdates(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let tasks = EmbeddedTaskRepository(store: store)
        let first = try await tasks.create(title: "One", description: "first", status: "OPEN")
        _ = try await tasks.create(title: "Two", description: "second", status: "OPEN")
        _ = try await tasks.create(title: "Three", description: "third", status: "OPEN")
        #expect(try await tasks.all(first: nil, after: 0).map(\.title) == ["One", "Two", "Three"])
        #expect(try await tasks.all(first: 1, after: 1).map(\.title) == ["Two"])
        let updated = try #require(try await tasks.update(id: first.id!, version: 1, title: nil, description: nil, status: "COMPLETE"))
        #expect(updated.version == 2 && updated.status == "COMPLETE" && updated.title == "One")
        await #expect(throws: TaskVersionConflict.self) { try await tasks.update(id: first.id!, version: 1, title: "stale", description: nil, status: nil) }
        #expect(try await tasks.find(id: first.id!)?.title == "One")
        #expect(try await tasks.update(id: 999, version: 1, title: "x", description: nil, status: nil) == nil)
        #expect(try await tasks.delete(id: first.id!)?.title == "One")
        #expect(try await tasks.delete(id: first.id!) == nil)
    }

    @Test(arguments: kinds) func pushDevicesAndTheirOutboxChangeTogether(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let ada = try await users(store).create(email: "ada@example.com", password: "long enough")
        let bob = try await users(store).create(email: "bob@example.com", password: "long enough")
        let devices = PushDeviceRepository(store: store)
        let ending = SessionEnding(
            sqlite: { db, ids in try SQLitePushStorage.sessionsEnding(ids, db: db) },
            postgres: { connection, ids in try await PostgresPushStorage.sessionsEnding(ids, connection: connection, logger: Logger(label: "test")) },
            afterwards: {}
        )
        let sessions = SessionRepository(store: store, ending: ending)
        let (session, _) = try await sessions.create(for: ada, userAgent: nil, ipAddress: nil)
        func registration(_ token: String, old: String? = nil) -> DeviceRegistration {
            DeviceRegistration(token: token, platform: .ios, operatingSystem: "iOS", osVersion: "17", categories: ["tasks"], oldToken: old)
        }
        let (device, _) = try await devices.register(registration("token-a"), userId: ada.id!, sessionId: session.id)
        #expect(device.state == .pending && device.categoryList == ["tasks"])
        await #expect(throws: ValidationFailed.self) { try await devices.register(registration("token-a"), userId: bob.id!, sessionId: nil) }
        // A new token replaces the old one: one device, one queued registration naming the old token.
        _ = try await devices.register(registration("token-b", old: "token-a"), userId: ada.id!, sessionId: session.id)
        #expect(try await devices.list(userId: ada.id!).map(\.token) == ["token-b"])
        var queued = try await devices.queued(limit: 10)
        #expect(queued.map(\.operation) == [.register] && queued[0].oldDeviceToken == "token-a" && queued[0].deviceToken == "token-b")
        try await devices.failed(queued[0], reason: "UPS away")
        #expect(try await devices.queued(limit: 10)[0].attempts == 1)
        try await devices.delivered(queued[0])
        #expect(try await devices.device(token: "token-b", userId: ada.id!)?.state == .registered)
        #expect(try await devices.device(token: "token-b", userId: bob.id!) == nil)

        try await devices.enqueue(messages: [Data("{}".utf8), Data("[]".utf8)])
        #expect(try await devices.recipients(excluding: bob.id!) == [ada.id!])
        #expect(try await devices.recipients(excluding: ada.id!).isEmpty)
        #expect(try await devices.recipients(excluding: nil) == [ada.id!])

        // Revoking the session the device came through unregisters it, in the same transaction.
        #expect(try await sessions.revoke(id: session.id, userId: ada.id!))
        #expect(try await devices.list(userId: ada.id!).isEmpty)
        queued = try await devices.queued(limit: 10)
        #expect(queued.map(\.operation) == [.send, .send, .unregister] && queued[2].deviceToken == "token-b")
        #expect(try await devices.unregister(token: "token-b", userId: ada.id!) == nil)

        // A registration UPS refused for good takes its pending device along.
        let (pending, _) = try await devices.register(registration("token-c"), userId: bob.id!, sessionId: nil)
        let operation = try #require(try await devices.queued(limit: 10).first { $0.deviceToken == pending.token })
        try await devices.abandoned(operation)
        #expect(try await devices.list(userId: bob.id!).isEmpty)
    }

    /// `Resources/sqlite-schema.sql` is what the migrations make. When a migration is added, this writes the new
    /// snapshot and says where, so it can be copied in.
    @Test func theSchemaSnapshotIsWhatTheMigrationsMake() throws {
        let migrated = try DatabaseQueue()
        try SQLiteStore.migrator.migrate(migrated)
        let expected = try migrated.read { try SQLiteSchemaSnapshot.text(of: $0) }
        let shipped = try String(contentsOfFile: packageRoot + "/Sources/Foyer/Resources/sqlite-schema.sql", encoding: .utf8)
        if shipped != expected {
            let written = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-schema.sql")
            try expected.write(to: written, atomically: true, encoding: .utf8)
            Issue.record("Resources/sqlite-schema.sql is not what the migrations make: cp \(written.path) Sources/Foyer/Resources/sqlite-schema.sql")
        }
    }

    /// A new database made from the snapshot is the one the migrations make; a database with anything in it, or
    /// migrations the snapshot is not the start of, are left to the migrations; newer migrations run after it.
    @Test func aNewDatabaseIsMadeFromTheSnapshotAsTheMigrationsWouldMakeIt() throws {
        let everything = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
        func schema(_ database: DatabaseQueue) throws -> [[String?]] {
            try database.read { db in try Row.fetchAll(db, sql: everything).map { row in (0..<4).map { row[$0] as String? } } }
        }
        func applied(_ database: DatabaseQueue) throws -> [String] {
            try database.read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations ORDER BY identifier") }
        }
        let migrated = try DatabaseQueue()
        try SQLiteStore.migrator.migrate(migrated)
        let loaded = try DatabaseQueue()
        #expect(try SQLiteSchemaSnapshot.loadIfEmpty(loaded, migrator: SQLiteStore.migrator))
        #expect(try loaded.read { try !SQLiteStore.migrator.hasBeenSuperseded($0) && SQLiteStore.migrator.hasCompletedMigrations($0) })
        #expect(try schema(loaded) == schema(migrated) && applied(loaded) == applied(migrated))
        #expect(try schema(loaded).count > 50)

        let started = try DatabaseQueue()
        try SQLiteStore.migrator.migrate(started, upTo: "v1: users and sessions")
        #expect(try !SQLiteSchemaSnapshot.loadIfEmpty(started, migrator: SQLiteStore.migrator))
        var other = DatabaseMigrator()
        other.registerMigration("v1: something else") { _ in }
        #expect(try !SQLiteSchemaSnapshot.loadIfEmpty(try DatabaseQueue(), migrator: other))

        var newer = SQLiteStore.migrator
        newer.registerMigration("v999: newer than the snapshot") { db in try db.create(table: "newer") { $0.column("x", .text) } }
        let grown = try DatabaseQueue()
        #expect(try SQLiteSchemaSnapshot.loadIfEmpty(grown, migrator: newer))
        try newer.migrate(grown)
        #expect(try grown.read { try $0.tableExists("newer") } && applied(grown).count == newer.migrations.count)
    }

    @Test func databaseLocationsAreSQLitePathsOrPostgresURLsAndBadURLsSayWhatIsWrong() throws {
        #expect(try StoreLocation("foyer.sqlite") == .sqlite(path: "foyer.sqlite"))
        #expect(try StoreLocation(":memory:") == .sqlite(path: ":memory:"))
        guard case .postgres(let location) = try StoreLocation("postgresql://fo%40yer:p%3Ass@db.internal:6543/foyer_prod?sslmode=verify-full") else {
            Issue.record("not read as PostgreSQL")
            return
        }
        #expect(location.username == "fo@yer" && location.password == "p:ss" && location.host == "db.internal")
        #expect(location.port == 6543 && location.database == "foyer_prod" && location.tls == .verifyFull)
        #expect(location.redacted == "postgres://fo@yer:***@db.internal:6543/foyer_prod?sslmode=verify-full")
        #expect(try StoreLocation("postgres://foyer@localhost/foyer") == .postgres(try PostgresLocation(url: "postgres://foyer@localhost:5432/foyer?sslmode=prefer")))
        for (url, says) in [
            ("postgres://localhost/foyer", "names no user"),
            ("postgres://foyer:secret@localhost", "names no database"),
            ("postgres://foyer:secret@localhost/foyer?sslmode=sometimes", "sslmode=sometimes is not one of"),
            ("postgres://foyer:secret@localhost/foyer?timeout=3", "timeout is not a database URL option"),
        ] {
            #expect {
                try StoreLocation(url)
            } throws: { error in
                let text = "\(error)"
                return text.contains(says) && !text.contains("secret")
            }
        }
    }

    @Test(arguments: kinds) func aServerSecretIsMadeOnceAndKept(kind: TestStoreKind) async throws {
        let store = try await Store.fresh(kind)
        defer { store.close() }
        let secret = try await store.serverSecret(named: "stream_names")
        #expect(secret.count == 32)
        #expect(try await store.serverSecret(named: "stream_names") == secret)
        #expect(try await store.serverSecret(named: "another") != secret)
        try await store.ping()
    }
}

/// SQLite on a file, as served: its readers are a pool, which requests read from on their event loop (`readNow`).
@Suite struct SQLiteReaderPoolTests {
    /// An event loop waits for a reader when all of them are taken. A read through GRDB's async `read` keeps its
    /// reader until its task runs again, on an event loop: with enough such reads at once, every reader was held by
    /// a task waiting for a loop and every loop waited for a reader, and the server stopped answering anything,
    /// `/up` included. The account page made one such read (found with 32 connections of wrk on `/account`).
    @Test(.timeLimit(.minutes(1))) func manyAccountPagesAtOnceAllAnswer() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-readers-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = Store.sqlite(try SQLiteStore.openAndMigrate(path: directory.appendingPathComponent("foyer.sqlite").path))
        try await TestHarness(store: store).test(.live) { client in
            let (token, _) = try await signIn(client)
            let request = "GET /account HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\nCookie: foyer_session=\(token)\r\nConnection: close\r\n\r\n"
            // 32 clients at once, each asking 20 times: wrk's 32 connections stopped the server within 5 requests.
            let (clients, pages) = (32, 20)
            let statuses = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<clients {
                    group.addTask {
                        var statuses: [Int] = []
                        for _ in 0..<pages {
                            statuses.append(try await RawConnection.exchange(port: client.port!, request, within: .seconds(50)).status)
                        }
                        return statuses
                    }
                }
                return try await group.reduce(into: [Int]()) { $0 += $1 }
            }
            #expect(statuses == Array(repeating: 200, count: clients * pages))
        }
    }

    /// The test above finds such a read only where a page it asks for makes one; this holds every source file to
    /// `readNow` (GRDB's async `read` cannot be closed to a module: its protocol's requirement wins over any overload).
    @Test func noSourceReadsSQLiteAsynchronously() throws {
        let sources = URL(fileURLWithPath: packageRoot).appendingPathComponent("Sources")
        // What GRDB's readers are called here: `database`, a `reader`, a `writer`, a `pool`, a `queue`.
        let asyncRead = try Regex(#"await\s+([A-Za-z0-9_]+\.)*(?i:database|reader|writer|pool|queue)\.(read|unsafeRead)\s*[({]"#)
        var found: [String] = []
        for case let file as URL in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)! where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: asyncRead) {
                found.append("\(file.lastPathComponent): \(text[match.range])")
            }
        }
        #expect(found.isEmpty, "read these with readNow: \(found)")
    }
}

/// Work one instance at a time does, across instances sharing a PostgreSQL database.
@Suite struct LeaseTests {
    @Test func aLeaseIsRenewedWhileItsWorkRunsFreedWhenItEndsAndTakenWhenItsHolderLetItLapse() async throws {
        let first = try await Store.fresh(.postgres)
        let second = try await Store.reopen(first)
        defer {
            first.close()
            second.close()
        }
        let (a, b) = (try #require(first.postgres), try #require(second.postgres))
        let term = Duration.milliseconds(600)
        let running = RunningCount()
        let holding = Task {
            try await a.withLease("work", term: term, waitingUpTo: nil) {
                running.enter()
                try await Task.sleep(for: term * 3)
                return "done"
            }
        }
        try await eventually { running.most == 1 }
        // Past two terms the holder has renewed it: the other instance does not get it.
        try await Task.sleep(for: term * 2)
        #expect(try await b.withLease("work", term: term, waitingUpTo: nil) { "taken" } == nil)
        // Waiting, it gets the lease as soon as the work is over.
        #expect(try await b.withLease("work", term: term, waitingUpTo: .seconds(5)) { "after" } == "after")
        #expect(try await holding.value == "done")

        // An instance that died holding a lease: it lapses after its term. (Two seconds: on a busy machine half a
        // second could pass before the next query, which then found it lapsed already.)
        try await a.query("INSERT INTO foyer_leases (name, holder, lapses_at) VALUES ('orphan', 'gone', now() + interval '2 seconds')")
        #expect(try await b.withLease("orphan", waitingUpTo: nil) { "early" } == nil)
        #expect(try await b.withLease("orphan", waitingUpTo: .seconds(10)) { "lapsed" } == "lapsed")
    }
}

/// Which sessions the ending hook was told of, in order.
private final class EndedSessions: @unchecked Sendable {
    private let lock = NSLock()
    private var ended: [String] = []
    var ids: [String] { lock.withLock { ended } }

    var hook: SessionEnding {
        SessionEnding(
            sqlite: { _, ids in self.lock.withLock { self.ended += ids } },
            postgres: { _, ids in self.lock.withLock { self.ended += ids } },
            afterwards: {}
        )
    }
}

private final class ChangeLog: @unchecked Sendable {
    private let lock = NSLock()
    private var changes: [String] = []
    var kinds: [String] { lock.withLock { changes } }

    func append(_ change: PostChange) {
        let kind = switch change {
        case .created: "created"
        case .updated: "updated"
        case .deleted: "deleted"
        }
        lock.withLock { changes.append(kind) }
    }
}

/// How many bodies ran at once, at most.
private final class RunningCount: @unchecked Sendable {
    private let lock = NSLock()
    private var now = 0
    private var highest = 0
    private var total = 0
    var most: Int { lock.withLock { highest } }
    var entered: Int { lock.withLock { total } }
    func enter() { lock.withLock { now += 1; total += 1; highest = max(highest, now) } }
    func leave() { lock.withLock { now -= 1 } }
}
