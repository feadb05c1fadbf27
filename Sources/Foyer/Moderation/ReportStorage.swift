import Foundation
import GRDB
import PostgresNIO

/// The rows behind reports.
protocol ReportStorage: Sendable {
    /// Files `draft` with a copy of its post, and the mail `mails` makes for the moderators, in one transaction.
    func file(_ draft: ReportDraft, now: Date, mails: @escaping ReportMails) async throws -> FiledReport
    /// A post held for a watched word, put in the queue as a report of no one's, with the moderators' mail.
    func hold(post: PublishedPost, word: String, now: Date, mails: @escaping ReportMails) async throws -> Report
}

extension Report {
    /// The report that puts a held post in the queue.
    static func held(_ post: PublishedPost, word: String, now: Date) -> Report {
        Report(
            id: 0, reporterId: nil, postId: post.id, userId: post.author.id, reason: .other, comment: "Held for review: it contains “\(word)”.",
            keptTitle: post.post.title, keptContent: post.post.content, keptPictureAlt: post.picture?.alt, status: .open, createdAt: now,
            resolvedAt: nil
        )
    }
}

extension Store {
    var reportStorage: any ReportStorage { choose(sqlite: SQLiteReportStorage.init, postgres: PostgresReportStorage.init) }
}

/// The SQL both stores run, so they cannot differ in what they count as the same report.
enum ReportRows {
    /// Copies the reported post's picture (its page-size JPEG, what every client can show) beside the report: an
    /// edit or a deletion afterwards takes nothing from what the moderators see. Arguments: the report, the post
    /// (numbered, which SQLite reads as its first and second parameters too).
    static let keepPicture = """
        INSERT INTO report_pictures (report_id, content_type, bytes)
        SELECT $1, 'image/jpeg', picture_files.bytes FROM picture_files JOIN pictures ON pictures.id = picture_files.picture_id
        WHERE pictures.post_id = $2 AND picture_files.variant = 'page' AND picture_files.encoding = 'jpeg'
        """

    /// What was reported, as the moderators' mail names it.
    static func target(_ target: Report.Target, title: String?, name: String) -> ModerationTarget {
        switch target {
        case .post: .post(title: title ?? "", by: name)
        case .user: .account(of: name)
        }
    }
}

struct SQLiteReportStorage: ReportStorage {
    let database: any DatabaseWriter

    func file(_ draft: ReportDraft, now: Date, mails: @escaping ReportMails) async throws -> FiledReport {
        try await database.write { db in
            let (column, id) = switch draft.target {
            case .post(let id): ("post_id", id)
            case .user(let id): ("user_id", id)
            }
            let sameTarget = draft.target.isPost ? "post_id = ?" : "user_id = ? AND post_id IS NULL"
            if let row = try Row.fetchOne(
                db, sql: "SELECT * FROM reports WHERE reporter_id = ? AND status = 'open' AND \(sameTarget)", arguments: [draft.reporterId, id]
            ) {
                return .alreadyOpen(try Self.report(row))
            }
            let hourAgo = now.addingTimeInterval(-3600)
            let recent = try Date.fetchAll(
                db, sql: "SELECT created_at FROM reports WHERE reporter_id = ? AND created_at > ? ORDER BY created_at", arguments: [draft.reporterId, hourAgo]
            )
            if recent.count >= Report.hourlyLimit, let oldest = recent.first { return .tooMany(retryAfter: oldest.addingTimeInterval(3600)) }
            var kept: (title: String?, content: String?, alt: String?) = (nil, nil, nil)
            let userId: Int64
            let name: String
            switch draft.target {
            case .post(let postId):
                guard let row = try Row.fetchOne(db, sql: """
                    SELECT posts.title, posts.content, posts.author_id, users.name, pictures.alt FROM posts JOIN users ON users.id = posts.author_id
                    LEFT JOIN pictures ON pictures.post_id = posts.id WHERE posts.id = ?
                    """, arguments: [postId]) else { return .unknownTarget }
                kept = (row["title"], row["content"], row["alt"])
                (userId, name) = (row["author_id"], row["name"])
            case .user(let reported):
                guard let found = try String.fetchOne(db, sql: "SELECT name FROM users WHERE id = ?", arguments: [reported]) else { return .unknownTarget }
                (userId, name) = (reported, found)
            }
            guard userId != draft.reporterId else { return .unknownTarget }
            let report = Report(
                id: 0, reporterId: draft.reporterId, postId: column == "post_id" ? id : nil, userId: userId, reason: draft.reason,
                comment: draft.comment, keptTitle: kept.title, keptContent: kept.content, keptPictureAlt: kept.alt, status: .open, createdAt: now,
                resolvedAt: nil
            )
            return .filed(try Self.insert(report, about: ReportRows.target(draft.target, title: kept.title, name: name), mails: mails, into: db))
        }
    }

    func hold(post: PublishedPost, word: String, now: Date, mails: @escaping ReportMails) async throws -> Report {
        try await database.write { db in
            let about = ReportRows.target(.post(post.id), title: post.post.title, name: post.author.name)
            return try Self.insert(Report.held(post, word: word, now: now), about: about, mails: mails, into: db)
        }
    }

    /// Stores a new report, numbered by the store, and the moderators' mail about `reported`, in `db`'s transaction.
    private static func insert(_ report: Report, about reported: ModerationTarget, mails: ReportMails, into db: Database) throws -> Report {
        try db.execute(sql: """
            INSERT INTO reports (reporter_id, post_id, user_id, reason, comment, kept_title, kept_content, kept_picture_alt, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [
                report.reporterId, report.postId, report.userId, report.reason.rawValue, report.comment, report.keptTitle, report.keptContent,
                report.keptPictureAlt, report.createdAt,
            ])
        var stored = report
        stored.id = db.lastInsertedRowID
        if let postId = report.postId {
            try db.execute(sql: ReportRows.keepPicture, arguments: [stored.id, postId])
        }
        let moderators = try User.fetchAll(db, sql: "SELECT * FROM users WHERE role IS NOT NULL ORDER BY id")
        for mail in mails(stored, reported, moderators) { try MailOutboxRows.insert(mail, into: db, now: report.createdAt) }
        return stored
    }

    static func report(_ row: Row) throws -> Report {
        Report(
            id: row["id"], reporterId: row["reporter_id"], postId: row["post_id"], userId: row["user_id"],
            reason: Report.Reason(rawValue: row["reason"]) ?? .other, comment: row["comment"], keptTitle: row["kept_title"],
            keptContent: row["kept_content"], keptPictureAlt: row["kept_picture_alt"], status: Report.Status(rawValue: row["status"]) ?? .open,
            createdAt: row["created_at"], resolvedAt: row["resolved_at"]
        )
    }
}

struct PostgresReportStorage: ReportStorage {
    let store: PostgresStore

    func file(_ draft: ReportDraft, now: Date, mails: @escaping ReportMails) async throws -> FiledReport {
        let logger = store.logger
        return try await store.transaction { connection in
            // One reporter's reports one at a time: two taps at once file one report, and the limit counts both.
            try await connection.run("SELECT pg_advisory_xact_lock(hashtext(\("report " + String(draft.reporterId))))", logger: logger)
            let existing: [PostgresRow]
            switch draft.target {
            case .post(let id):
                existing = try await connection.run(
                    "SELECT * FROM reports WHERE reporter_id = \(draft.reporterId) AND status = 'open' AND post_id = \(id)", logger: logger
                )
            case .user(let id):
                existing = try await connection.run(
                    "SELECT * FROM reports WHERE reporter_id = \(draft.reporterId) AND status = 'open' AND user_id = \(id) AND post_id IS NULL",
                    logger: logger
                )
            }
            if let row = existing.first { return .alreadyOpen(try Self.report(row.makeRandomAccess())) }
            let recent = try await connection.run(
                "SELECT created_at FROM reports WHERE reporter_id = \(draft.reporterId) AND created_at > \(now.addingTimeInterval(-3600)) ORDER BY created_at",
                logger: logger
            ).map { try $0.decode(Date.self) }
            if recent.count >= Report.hourlyLimit, let oldest = recent.first { return .tooMany(retryAfter: oldest.addingTimeInterval(3600)) }
            var kept: (title: String?, content: String?, alt: String?) = (nil, nil, nil)
            var postId: Int64?
            let userId: Int64
            let name: String
            switch draft.target {
            case .post(let id):
                guard let row = try await connection.run("""
                    SELECT posts.title, posts.content, posts.author_id, users.name, pictures.alt FROM posts JOIN users ON users.id = posts.author_id
                    LEFT JOIN pictures ON pictures.post_id = posts.id WHERE posts.id = \(id)
                    """, logger: logger).first else { return .unknownTarget }
                let (title, content, author, authorName, alt) = try row.decode((String, String, Int64, String, String?).self)
                kept = (title, content, alt)
                (postId, userId, name) = (id, author, authorName)
            case .user(let id):
                guard let row = try await connection.run("SELECT name FROM users WHERE id = \(id)", logger: logger).first else {
                    return .unknownTarget
                }
                (userId, name) = (id, try row.decode(String.self))
            }
            guard userId != draft.reporterId else { return .unknownTarget }
            let report = Report(
                id: 0, reporterId: draft.reporterId, postId: postId, userId: userId, reason: draft.reason, comment: draft.comment,
                keptTitle: kept.title, keptContent: kept.content, keptPictureAlt: kept.alt, status: .open, createdAt: now, resolvedAt: nil
            )
            let about = ReportRows.target(draft.target, title: kept.title, name: name)
            return .filed(try await Self.insert(report, about: about, mails: mails, into: connection, logger: logger))
        }
    }

    func hold(post: PublishedPost, word: String, now: Date, mails: @escaping ReportMails) async throws -> Report {
        let logger = store.logger
        return try await store.transaction { connection in
            let about = ReportRows.target(.post(post.id), title: post.post.title, name: post.author.name)
            return try await Self.insert(Report.held(post, word: word, now: now), about: about, mails: mails, into: connection, logger: logger)
        }
    }

    /// Stores a new report, numbered by the store, and the moderators' mail about `reported`, in the transaction.
    private static func insert(
        _ report: Report, about reported: ModerationTarget, mails: ReportMails, into connection: PostgresConnection, logger: Logger
    ) async throws -> Report {
        var stored = report
        stored.id = try await connection.run("""
            INSERT INTO reports (reporter_id, post_id, user_id, reason, comment, kept_title, kept_content, kept_picture_alt, created_at)
            VALUES (\(report.reporterId), \(report.postId), \(report.userId), \(report.reason.rawValue), \(report.comment), \(report.keptTitle),
            \(report.keptContent), \(report.keptPictureAlt), \(report.createdAt)) RETURNING id
            """, logger: logger)[0].decode(Int64.self)
        if let postId = report.postId {
            var bindings = PostgresBindings()
            bindings.append(stored.id)
            bindings.append(postId)
            _ = try await connection.run(PostgresQuery(unsafeSQL: ReportRows.keepPicture, binds: bindings), logger: logger)
        }
        let moderators = try await connection.run("SELECT * FROM users WHERE role IS NOT NULL ORDER BY id", logger: logger).map {
            try PostgresUsers.user($0.makeRandomAccess())
        }
        for mail in mails(stored, reported, moderators) { try await MailOutboxRows.insert(mail, into: connection, logger: logger, now: report.createdAt) }
        return stored
    }

    static func report(_ row: PostgresRandomAccessRow) throws -> Report {
        Report(
            id: try row["id"].decode(Int64.self), reporterId: try row["reporter_id"].decode(Int64?.self), postId: try row["post_id"].decode(Int64?.self),
            userId: try row["user_id"].decode(Int64?.self), reason: Report.Reason(rawValue: try row["reason"].decode(String.self)) ?? .other,
            comment: try row["comment"].decode(String.self), keptTitle: try row["kept_title"].decode(String?.self),
            keptContent: try row["kept_content"].decode(String?.self), keptPictureAlt: try row["kept_picture_alt"].decode(String?.self),
            status: Report.Status(rawValue: try row["status"].decode(String.self)) ?? .open, createdAt: try row["created_at"].decode(Date.self),
            resolvedAt: try row["resolved_at"].decode(Date?.self)
        )
    }
}

extension Report.Target {
    var isPost: Bool { if case .post = self { true } else { false } }
}
