import Foundation
import GRDB
import Logging
import NIOCore
import PostgresNIO

/// Pictures' rows: written in the transaction of the post they belong to (`PostStorage`), and read back one file
/// at a time to serve. Deleting a post deletes its picture by the foreign key (and an account its posts).
protocol PictureStorage: Sendable {
    func file(id: String, variant: Picture.Variant, encoding: Picture.Encoding) async throws -> ByteBuffer?
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

    func file(id: String, variant: Picture.Variant, encoding: Picture.Encoding) async throws -> ByteBuffer? {
        try database.readStatementNow { db in
            let statement = try db.cachedStatement(sql: "SELECT bytes FROM picture_files WHERE picture_id = ? AND variant = ? AND encoding = ?")
            return try Data.fetchOne(statement, arguments: [id, variant.rawValue, encoding.rawValue]).map { ByteBuffer(data: $0) }
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

    func file(id: String, variant: Picture.Variant, encoding: Picture.Encoding) async throws -> ByteBuffer? {
        try await store.query("""
            SELECT bytes FROM picture_files WHERE picture_id = \(id) AND variant = \(variant.rawValue) AND encoding = \(encoding.rawValue)
            """).first?.decode(ByteBuffer.self)
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
