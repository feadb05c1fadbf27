import Foundation
import GRDB
import Logging
import NIOCore
import PostgresNIO

/// Pictures' rows: written in the transaction of the post they belong to (`PostStorage`), and read back one file
/// at a time to serve. Deleting a post deletes its picture by the foreign key (and an account its posts).
protocol PictureStorage: Sendable {
    func file(id: String, variant: Picture.Variant, encoding: Picture.Encoding) async throws -> StoredPictureFile?
}

/// A variant's bytes, and who may see them: everyone, or (`hidden`: its post was removed or held by a moderator,
/// or its author suspended) only the post's author and moderators.
struct StoredPictureFile: Sendable {
    let bytes: ByteBuffer
    let authorId: Int64
    let hidden: Bool

    /// Both stores read a file with its post's state in one statement (SQLite's `?`, PostgreSQL's `$n`).
    static func select(_ parameters: (String, String, String)) -> String {
        """
        SELECT picture_files.bytes, posts.author_id, (posts.hidden IS NOT NULL OR users.suspended_at IS NOT NULL) AS hidden
        FROM picture_files JOIN pictures ON pictures.id = picture_files.picture_id JOIN posts ON posts.id = pictures.post_id
        JOIN users ON users.id = posts.author_id
        WHERE picture_files.picture_id = \(parameters.0) AND picture_files.variant = \(parameters.1) AND picture_files.encoding = \(parameters.2)
        """
    }
}

extension Store {
    var pictureStorage: any PictureStorage { choose(sqlite: SQLitePictureStorage.init, postgres: PostgresPictureStorage.init) }
}

/// The picture columns a post's select adds, renamed so they cannot clash with the post's own.
enum PictureColumns {
    static let select = """
        pictures.id AS picture_id, pictures.alt AS picture_alt, pictures.width AS picture_width, \
        pictures.height AS picture_height, pictures.thumbnail_width AS picture_thumbnail_width, \
        pictures.thumbnail_height AS picture_thumbnail_height
        """
    static let join = "LEFT JOIN pictures ON pictures.post_id = posts.id"
}

struct SQLitePictureStorage: PictureStorage {
    let database: any DatabaseWriter

    func file(id: String, variant: Picture.Variant, encoding: Picture.Encoding) async throws -> StoredPictureFile? {
        try database.readStatementNow { db in
            let statement = try db.cachedStatement(sql: StoredPictureFile.select(("?", "?", "?")))
            return try Row.fetchOne(statement, arguments: [id, variant.rawValue, encoding.rawValue]).map {
                StoredPictureFile(bytes: ByteBuffer(data: $0["bytes"]), authorId: $0["author_id"], hidden: $0["hidden"])
            }
        }
    }

    static func picture(in row: Row) -> Picture? {
        guard let id: String = row["picture_id"] else { return nil }
        return Picture(
            id: id, alt: row["picture_alt"], width: row["picture_width"], height: row["picture_height"],
            thumbnailWidth: row["picture_thumbnail_width"], thumbnailHeight: row["picture_thumbnail_height"]
        )
    }

    static func apply(_ change: PictureChange, postID: Int64, in db: Database) throws {
        switch change {
        case .describe(let alt):
            try db.execute(sql: "UPDATE pictures SET alt = ? WHERE post_id = ?", arguments: [alt, postID])
        case .remove:
            try db.execute(sql: "DELETE FROM pictures WHERE post_id = ?", arguments: [postID])
        case .replace(let new):
            try db.execute(sql: "DELETE FROM pictures WHERE post_id = ?", arguments: [postID])
            let picture = new.picture
            try db.execute(
                sql: """
                    INSERT INTO pictures (id, post_id, alt, width, height, thumbnail_width, thumbnail_height, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [picture.id, postID, picture.alt, picture.width, picture.height, picture.thumbnailWidth, picture.thumbnailHeight, Date()]
            )
            for file in new.files {
                try db.execute(
                    sql: "INSERT INTO picture_files (picture_id, variant, encoding, bytes) VALUES (?, ?, ?, ?)",
                    arguments: [picture.id, file.variant.rawValue, file.encoding.rawValue, Data(buffer: file.bytes)]
                )
            }
        }
    }
}

struct PostgresPictureStorage: PictureStorage {
    let store: PostgresStore

    func file(id: String, variant: Picture.Variant, encoding: Picture.Encoding) async throws -> StoredPictureFile? {
        var bindings = PostgresBindings()
        bindings.append(id)
        bindings.append(variant.rawValue)
        bindings.append(encoding.rawValue)
        return try await store.query(PostgresQuery(unsafeSQL: StoredPictureFile.select(("$1", "$2", "$3")), binds: bindings)).first.map {
            let (bytes, authorId, hidden) = try $0.decode((ByteBuffer, Int64, Bool).self)
            return StoredPictureFile(bytes: bytes, authorId: authorId, hidden: hidden)
        }
    }

    static func picture(in row: PostgresRandomAccessRow) throws -> Picture? {
        guard let id = try row["picture_id"].decode(String?.self) else { return nil }
        return Picture(
            id: id, alt: try row["picture_alt"].decode(String.self),
            width: try row["picture_width"].decode(Int.self), height: try row["picture_height"].decode(Int.self),
            thumbnailWidth: try row["picture_thumbnail_width"].decode(Int.self),
            thumbnailHeight: try row["picture_thumbnail_height"].decode(Int.self)
        )
    }

    static func apply(_ change: PictureChange, postID: Int64, on connection: PostgresConnection, logger: Logger) async throws {
        switch change {
        case .describe(let alt):
            try await connection.run("UPDATE pictures SET alt = \(alt) WHERE post_id = \(postID)", logger: logger)
        case .remove:
            try await connection.run("DELETE FROM pictures WHERE post_id = \(postID)", logger: logger)
        case .replace(let new):
            try await connection.run("DELETE FROM pictures WHERE post_id = \(postID)", logger: logger)
            let picture = new.picture
            try await connection.run("""
                INSERT INTO pictures (id, post_id, alt, width, height, thumbnail_width, thumbnail_height, created_at)
                VALUES (\(picture.id), \(postID), \(picture.alt), \(picture.width), \(picture.height), \(picture.thumbnailWidth),
                        \(picture.thumbnailHeight), \(Date()))
                """, logger: logger)
            for file in new.files {
                try await connection.run("""
                    INSERT INTO picture_files (picture_id, variant, encoding, bytes)
                    VALUES (\(picture.id), \(file.variant.rawValue), \(file.encoding.rawValue), \(file.bytes))
                    """, logger: logger)
            }
        }
    }
}
