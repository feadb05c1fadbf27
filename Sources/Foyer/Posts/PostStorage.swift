import Foundation
import GRDB
import Logging
import PostgresNIO

/// The rows behind `PostRepository`: posts with their authors' names.
protocol PostStorage: Sendable {
    /// Newest first, and how many there are in all, leaving out posts by `excluded` authors (blocks).
    func page(limit: Int, offset: Int, excluding excluded: Set<Int64>) async throws -> (posts: [PublishedPost], total: Int)
    /// One author's posts that everyone may see, newest first.
    func posts(by authorId: Int64, limit: Int) async throws -> [PublishedPost]
    /// When the author wrote each post since `date`.
    func creationTimes(by authorId: Int64, since date: Date) async throws -> [Date]
    func find(id: Int64) async throws -> PublishedPost?
    /// The post with its new id; its picture, if any, in the same transaction.
    func insert(_ post: Post, picture: NewPicture?) async throws -> Post
    /// Writes `post` as its next version, if it is still at `post.version` (else false, and nothing is written): two
    /// edits made from the same read cannot both land. `snapshot`: the fields it has then, kept as that version.
    func update(_ post: Post, picture: PictureChange?, snapshot: PostSnapshot) async throws -> Bool
    /// The post's fields at `version`; nil when that version was never kept.
    func snapshot(of id: Int64, at version: Int) async throws -> PostSnapshot?
    /// `version`: only while the post is at it (nil: whatever it is at).
    func delete(id: Int64, version: Int?) async throws -> Bool
    /// Whether a post of this id was deleted by its author (only the id and when are kept, none of its words).
    func wasDeleted(id: Int64) async throws -> Bool
    func count() async throws -> Int
}

/// Lists show what everyone may see: no post a moderator removed or holds, nothing of a suspended account.
enum PostVisibility {
    static let listed = "posts.hidden IS NULL AND users.suspended_at IS NULL"
}

extension Store {
    var postStorage: any PostStorage { choose(sqlite: SQLitePostStorage.init, postgres: PostgresPostStorage.init) }
}

struct SQLitePostStorage: PostStorage {
    let database: any DatabaseWriter

    private static let selectWithAuthor = """
        SELECT posts.*, users.name AS author_name, users.suspended_at AS author_suspended_at, \(PictureColumns.select)
        FROM posts JOIN users ON users.id = posts.author_id \(PictureColumns.join)
        """

    func page(limit: Int, offset: Int, excluding excluded: Set<Int64>) async throws -> (posts: [PublishedPost], total: Int) {
        let filter = PostVisibility.listed + (excluded.isEmpty ? "" : " AND posts.author_id NOT IN (\(excluded.map(String.init).joined(separator: ",")))")
        return try database.readNow { db in
            let rows = try Row.fetchAll(
                db, sql: Self.selectWithAuthor + " WHERE \(filter) ORDER BY posts.created_at DESC, posts.id DESC LIMIT ? OFFSET ?",
                arguments: [limit, offset]
            )
            let total = try Int.fetchOne(db, sql: "SELECT count(*) FROM posts JOIN users ON users.id = posts.author_id WHERE \(filter)")
            return (try rows.map(Self.published), total ?? 0)
        }
    }

    func creationTimes(by authorId: Int64, since date: Date) async throws -> [Date] {
        try database.readNow { db in
            try Date.fetchAll(db, sql: "SELECT created_at FROM posts WHERE author_id = ? AND created_at > ?", arguments: [authorId, date])
        }
    }

    func posts(by authorId: Int64, limit: Int) async throws -> [PublishedPost] {
        try database.readNow { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: Self.selectWithAuthor + " WHERE \(PostVisibility.listed) AND posts.author_id = ? ORDER BY posts.created_at DESC, posts.id DESC LIMIT ?"
                ),
                arguments: [authorId, limit]
            ).map(Self.published)
        }
    }

    func find(id: Int64) async throws -> PublishedPost? {
        try database.readStatementNow { db in
            try Row.fetchOne(db.cachedStatement(sql: Self.selectWithAuthor + " WHERE posts.id = ?"), arguments: [id]).map(Self.published)
        }
    }

    func insert(_ post: Post, picture: NewPicture?) async throws -> Post {
        try await database.write { [post] db in
            var post = post
            try post.insert(db)
            if let picture, let id = post.id { try SQLitePictureStorage.apply(.replace(picture), postID: id, in: db) }
            try Self.keep(PostSnapshot(post, picture: picture?.picture), of: post, in: db)
            return post
        }
    }

    func update(_ post: Post, picture: PictureChange?, snapshot: PostSnapshot) async throws -> Bool {
        try await database.write { db in
            // The fields a person changes, not `hidden`: a moderator's removal meanwhile stays, and a hold is added
            // only where nothing else hides the post.
            try db.execute(
                sql: "UPDATE posts SET title = ?, content = ?, updated_at = ?, version = version + 1 WHERE id = ? AND version = ?",
                arguments: [post.title, post.content, post.updatedAt, post.id, post.version]
            )
            guard db.changesCount > 0 else { return false }
            if post.hidden == .held {
                try db.execute(sql: "UPDATE posts SET hidden = 'held', hidden_at = ? WHERE id = ? AND hidden IS NULL", arguments: [post.hiddenAt, post.id])
            }
            if let picture, let id = post.id { try SQLitePictureStorage.apply(picture, postID: id, in: db) }
            var next = post
            next.version += 1
            try Self.keep(snapshot, of: next, in: db)
            return true
        }
    }

    private static func keep(_ snapshot: PostSnapshot, of post: Post, in db: Database) throws {
        try db.execute(
            sql: "INSERT INTO post_versions (post_id, version, title, content, picture_id, picture_alt, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            arguments: [post.id, post.version, snapshot.title, snapshot.content, snapshot.pictureId, snapshot.alt, post.updatedAt]
        )
        try db.execute(
            sql: "DELETE FROM post_versions WHERE post_id = ? AND version <= ?", arguments: [post.id, post.version - PostVersionRows.kept]
        )
    }

    func snapshot(of id: Int64, at version: Int) async throws -> PostSnapshot? {
        try database.readNow { db in
            try Row.fetchOne(
                db, sql: "SELECT title, content, picture_id, picture_alt FROM post_versions WHERE post_id = ? AND version = ?", arguments: [id, version]
            ).map { PostSnapshot(title: $0["title"], content: $0["content"], pictureId: $0["picture_id"], alt: $0["picture_alt"]) }
        }
    }

    func delete(id: Int64, version: Int?) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM posts WHERE id = ? AND (? IS NULL OR version = ?)", arguments: [id, version, version])
            guard db.changesCount > 0 else { return false }
            try db.execute(sql: "INSERT OR REPLACE INTO deleted_posts (id, deleted_at) VALUES (?, ?)", arguments: [id, Date()])
            return true
        }
    }

    func wasDeleted(id: Int64) async throws -> Bool {
        try database.readNow { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM deleted_posts WHERE id = ?", arguments: [id]) ?? false }
    }

    func count() async throws -> Int {
        try database.readNow { try Post.fetchCount($0) }
    }

    private static func published(_ row: Row) throws -> PublishedPost {
        let post = try Post(row: row)
        return PublishedPost(
            post: post, author: User.Public(id: post.authorId, name: row["author_name"]), picture: SQLitePictureStorage.picture(in: row),
            authorSuspended: row["author_suspended_at"] as Date? != nil
        )
    }
}

struct PostgresPostStorage: PostStorage {
    let store: PostgresStore

    func page(limit: Int, offset: Int, excluding excluded: Set<Int64>) async throws -> (posts: [PublishedPost], total: Int) {
        let excludedIDs = Array(excluded)
        // One round trip: the total rides on every row (and is asked alone when the page is past the end).
        let rows = try await store.query("""
            SELECT posts.*, users.name AS author_name, users.suspended_at AS author_suspended_at, \(unescaped: PictureColumns.select),
                count(*) OVER () AS total
            FROM posts JOIN users ON users.id = posts.author_id \(unescaped: PictureColumns.join)
            WHERE \(unescaped: PostVisibility.listed) AND NOT (posts.author_id = ANY(\(excludedIDs)))
            ORDER BY posts.created_at DESC, posts.id DESC LIMIT \(limit) OFFSET \(offset)
            """)
        let total = if let first = rows.first {
            try first.makeRandomAccess()["total"].decode(Int.self)
        } else {
            try await store.query("""
                SELECT count(*) FROM posts JOIN users ON users.id = posts.author_id
                WHERE \(unescaped: PostVisibility.listed) AND NOT (posts.author_id = ANY(\(excludedIDs)))
                """)[0].decode(Int.self)
        }
        return (try rows.map(Self.published), total)
    }

    func creationTimes(by authorId: Int64, since date: Date) async throws -> [Date] {
        try await store.query("SELECT created_at FROM posts WHERE author_id = \(authorId) AND created_at > \(date)").map { try $0.decode(Date.self) }
    }

    func posts(by authorId: Int64, limit: Int) async throws -> [PublishedPost] {
        try await store.query("""
            SELECT posts.*, users.name AS author_name, users.suspended_at AS author_suspended_at, \(unescaped: PictureColumns.select)
            FROM posts JOIN users ON users.id = posts.author_id \(unescaped: PictureColumns.join)
            WHERE \(unescaped: PostVisibility.listed) AND posts.author_id = \(authorId)
            ORDER BY posts.created_at DESC, posts.id DESC LIMIT \(limit)
            """).map(Self.published)
    }

    func find(id: Int64) async throws -> PublishedPost? {
        try await store.execute(FindPost(id: id)).first
    }

    /// The point read behind `GET /api/v1/posts/{id}` and every post page, prepared once per connection and read
    /// by position rather than through `Decodable`.
    private struct FindPost: PostgresPreparedStatement {
        static let sql = """
            SELECT posts.id, posts.title, posts.content, posts.author_id, posts.created_at, posts.updated_at, users.name,
                pictures.id, pictures.alt, pictures.width, pictures.height, pictures.thumbnail_width, pictures.thumbnail_height,
                posts.hidden, posts.hidden_at, users.suspended_at, posts.version
            FROM posts JOIN users ON users.id = posts.author_id \(PictureColumns.join) WHERE posts.id = $1
            """
        let id: Int64

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(id)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> PublishedPost {
            let (id, title, content, authorId, createdAt, updatedAt, name, pictureID, alt, width, height, thumbnailWidth, thumbnailHeight, hidden, hiddenAt, suspendedAt, version) =
                try row.decode((Int64, String, String, Int64, Date, Date, String, String?, String?, Int?, Int?, Int?, Int?, String?, Date?, Date?, Int).self)
            var post = Post(id: id, title: title, content: content, authorId: authorId, createdAt: createdAt, updatedAt: updatedAt)
            (post.hidden, post.hiddenAt, post.version) = (hidden.flatMap(Post.Hidden.init(rawValue:)), hiddenAt, version)
            let picture = pictureID.map { pictureID in
                Picture(
                    id: pictureID, alt: alt ?? "", width: width ?? 0, height: height ?? 0,
                    thumbnailWidth: thumbnailWidth ?? 0, thumbnailHeight: thumbnailHeight ?? 0
                )
            }
            return PublishedPost(post: post, author: User.Public(id: authorId, name: name), picture: picture, authorSuspended: suspendedAt != nil)
        }
    }

    func insert(_ post: Post, picture: NewPicture?) async throws -> Post {
        let logger = store.logger
        return try await store.transaction { connection in
            var inserted = post
            let id = try await connection.run("""
                INSERT INTO posts (title, content, author_id, created_at, updated_at, hidden, hidden_at)
                VALUES (\(post.title), \(post.content), \(post.authorId), \(post.createdAt), \(post.updatedAt), \(post.hidden?.rawValue),
                \(post.hiddenAt)) RETURNING id
                """, logger: logger)[0].decode(Int64.self)
            inserted.id = id
            if let picture { try await PostgresPictureStorage.apply(.replace(picture), postID: id, on: connection, logger: logger) }
            try await Self.keep(PostSnapshot(inserted, picture: picture?.picture), of: inserted, on: connection, logger: logger)
            return inserted
        }
    }

    func update(_ post: Post, picture: PictureChange?, snapshot: PostSnapshot) async throws -> Bool {
        let logger = store.logger
        return try await store.transaction { connection in
            let written = try await connection.run("""
                UPDATE posts SET title = \(post.title), content = \(post.content), updated_at = \(post.updatedAt), version = version + 1
                WHERE id = \(post.id) AND version = \(post.version) RETURNING id
                """, logger: logger)
            guard !written.isEmpty else { return false }
            // Held only when nothing else hides it: a moderator's removal meanwhile stays.
            if post.hidden == .held {
                try await connection.run(
                    "UPDATE posts SET hidden = 'held', hidden_at = \(post.hiddenAt) WHERE id = \(post.id) AND hidden IS NULL", logger: logger
                )
            }
            if let picture, let id = post.id { try await PostgresPictureStorage.apply(picture, postID: id, on: connection, logger: logger) }
            var next = post
            next.version += 1
            try await Self.keep(snapshot, of: next, on: connection, logger: logger)
            return true
        }
    }

    private static func keep(_ snapshot: PostSnapshot, of post: Post, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.run("""
            INSERT INTO post_versions (post_id, version, title, content, picture_id, picture_alt, created_at)
            VALUES (\(post.id), \(post.version), \(snapshot.title), \(snapshot.content), \(snapshot.pictureId), \(snapshot.alt), \(post.updatedAt))
            """, logger: logger)
        try await connection.run(
            "DELETE FROM post_versions WHERE post_id = \(post.id) AND version <= \(post.version - PostVersionRows.kept)", logger: logger
        )
    }

    func snapshot(of id: Int64, at version: Int) async throws -> PostSnapshot? {
        try await store.query("""
            SELECT title, content, picture_id, picture_alt FROM post_versions WHERE post_id = \(id) AND version = \(version)
            """).first.map {
            let (title, content, pictureId, alt) = try $0.decode((String, String, String?, String?).self)
            return PostSnapshot(title: title, content: content, pictureId: pictureId, alt: alt)
        }
    }

    func delete(id: Int64, version: Int?) async throws -> Bool {
        try await !store.query("""
            WITH gone AS (DELETE FROM posts WHERE id = \(id) AND (\(version)::integer IS NULL OR version = \(version)) RETURNING id)
            INSERT INTO deleted_posts (id, deleted_at) SELECT id, now() FROM gone ON CONFLICT (id) DO UPDATE SET deleted_at = excluded.deleted_at RETURNING id
            """).isEmpty
    }

    func wasDeleted(id: Int64) async throws -> Bool {
        try await !store.query("SELECT 1 FROM deleted_posts WHERE id = \(id)").isEmpty
    }

    func count() async throws -> Int {
        try await store.query("SELECT count(*) FROM posts")[0].decode(Int.self)
    }

    private static func published(_ row: PostgresRow) throws -> PublishedPost {
        let row = row.makeRandomAccess()
        let post = try row.decode(Post.self)
        return PublishedPost(
            post: post, author: User.Public(id: post.authorId, name: try row["author_name"].decode(String.self)),
            picture: try PostgresPictureStorage.picture(in: row), authorSuspended: try row["author_suspended_at"].decode(Date?.self) != nil
        )
    }
}
