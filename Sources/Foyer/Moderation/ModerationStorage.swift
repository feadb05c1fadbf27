import Foundation
import GRDB
import PostgresNIO

/// The rows behind the moderation queue: reports by status, the actions taken on them, and the audit log.
protocol ModerationStorage: Sendable {
    /// Oldest first when open, newest first when resolved; at most `limit`.
    func reports(status: Report.Status, limit: Int) async throws -> [ReportRecord]
    func report(id: Int64) async throws -> Report?
    /// The picture a report kept of its post, as it was then; nil when the post had none.
    func keptPicture(of reportId: Int64) async throws -> (contentType: String, bytes: ByteBuffer)?
    /// Does `request` with everything it writes (its effect, the reports it closes, the log line, the mail) in one
    /// transaction; nil when its target is gone (a post deleted since, an account deleted since).
    func act(_ request: ModerationRequest, now: Date, mails: @escaping ModerationMails) async throws -> ModerationOutcome?
    func log(_ entry: ModerationLogEntry) async throws
    /// Newest first.
    func auditLog(limit: Int) async throws -> [ModerationLogEntry]
    /// How many reports are open, and since when the oldest.
    func openReports() async throws -> (count: Int, oldest: Date?)
    /// Deletes posts removed before `date` (their pictures go with them); their ids.
    func purgeRemovedPosts(before date: Date) async throws -> [Int64]
}

extension Store {
    var moderationStorage: any ModerationStorage { choose(sqlite: SQLiteModerationStorage.init, postgres: PostgresModerationStorage.init) }
}

/// The SQL both stores share, so they cannot differ in what an action reaches.
enum ModerationRows {
    static let reportColumns = """
        reports.*, reporter.name AS reporter_name, reported.name AS reported_name, reported.suspended_at AS reported_suspended_at,
        posts.id AS current_post_id, posts.hidden AS current_post_hidden
        """
    static let reportJoins = """
        LEFT JOIN users reporter ON reporter.id = reports.reporter_id LEFT JOIN users reported ON reported.id = reports.user_id
        LEFT JOIN posts ON posts.id = reports.post_id
        """

    /// Which reports an action closes: those about the same post, or about the person (with their posts', for a
    /// suspension), with the value to bind.
    static func scope(of request: ModerationRequest) -> (condition: String, value: Int64)? {
        let report = request.report
        if request.action.coversThePerson { return report.userId.map { ("user_id = ?", $0) } }
        if let post = report.postId { return ("post_id = ?", post) }
        return report.userId.map { ("user_id = ? AND post_id IS NULL", $0) }
    }

    /// What a post's `hidden` becomes, and what it must be before, for the actions on posts.
    static func postChange(_ action: ModerationAction) -> (to: Post.Hidden?, from: String)? {
        switch action {
        case .removePost: (.removed, "hidden IS NULL OR hidden = 'held'")
        case .restore: (nil, "hidden = 'removed'")
        case .approve: (nil, "hidden = 'held'")
        default: nil
        }
    }

    static func target(of report: Report, postTitle: String?, userName: String?) -> ModerationTarget {
        if report.postId != nil { return .post(title: postTitle ?? report.keptTitle ?? "", by: userName) }
        return .account(of: userName)
    }

    /// What a line of the log is about, from its columns; nil on lines written before they were kept.
    static func about(kind: String?, title: String?, name: String?) -> ModerationTarget? {
        kind.flatMap(ModerationTarget.Kind.init(rawValue:)).map { ModerationTarget(kind: $0, postTitle: title, name: name) }
    }

    static func postState(id: Int64?, hidden: String?) -> ReportRecord.PostState? {
        guard id != nil else { return nil }
        return hidden.flatMap(Post.Hidden.init(rawValue:)).map { .hidden($0) } ?? .shown
    }
}

struct SQLiteModerationStorage: ModerationStorage {
    let database: any DatabaseWriter

    func reports(status: Report.Status, limit: Int) async throws -> [ReportRecord] {
        try database.readNow { db in
            try Row.fetchAll(db, sql: """
                SELECT \(ModerationRows.reportColumns) FROM reports \(ModerationRows.reportJoins)
                WHERE reports.status = ? ORDER BY reports.created_at \(status == .open ? "ASC" : "DESC"), reports.id LIMIT ?
                """, arguments: [status.rawValue, limit]).map { row in
                ReportRecord(
                    report: try SQLiteReportStorage.report(row), reporterName: row["reporter_name"], reportedName: row["reported_name"],
                    reportedSuspended: row["reported_suspended_at"] as Date? != nil,
                    postState: ModerationRows.postState(id: row["current_post_id"], hidden: row["current_post_hidden"])
                )
            }
        }
    }

    func report(id: Int64) async throws -> Report? {
        try database.readNow { db in try Row.fetchOne(db, sql: "SELECT * FROM reports WHERE id = ?", arguments: [id]).map(SQLiteReportStorage.report) }
    }

    func keptPicture(of reportId: Int64) async throws -> (contentType: String, bytes: ByteBuffer)? {
        try database.readNow { db in
            try Row.fetchOne(db, sql: "SELECT content_type, bytes FROM report_pictures WHERE report_id = ?", arguments: [reportId]).map {
                ($0["content_type"], ByteBuffer(data: $0["bytes"]))
            }
        }
    }

    func act(_ request: ModerationRequest, now: Date, mails: @escaping ModerationMails) async throws -> ModerationOutcome? {
        try await database.write { db in
            let report = request.report
            var postTitle: String?
            var postIDs: [Int64] = []
            if request.action.needsPost {
                guard let postId = report.postId, let title = try String.fetchOne(db, sql: "SELECT title FROM posts WHERE id = ?", arguments: [postId]) else {
                    return nil
                }
                postTitle = title
                if let change = ModerationRows.postChange(request.action) {
                    try db.execute(
                        sql: "UPDATE posts SET hidden = ?, hidden_at = ? WHERE id = ? AND (\(change.from))",
                        arguments: [change.to?.rawValue, change.to == nil ? nil : now, postId]
                    )
                    if db.changesCount > 0 { postIDs = [postId] }
                }
            } else if let postId = report.postId {
                postTitle = try String.fetchOne(db, sql: "SELECT title FROM posts WHERE id = ?", arguments: [postId])
            }
            let affected = try report.userId.flatMap { try SQLiteUserStorage.user(id: $0, db) }
            if request.action.coversThePerson {
                guard let user = affected, let userId = user.id else { return nil }
                try db.execute(
                    sql: "UPDATE users SET suspended_at = ? WHERE id = ?", arguments: [request.action == .suspendUser ? now : nil, userId]
                )
                postIDs = try Int64.fetchAll(db, sql: "SELECT id FROM posts WHERE author_id = ? AND hidden IS NULL", arguments: [userId])
            }
            var reporters: [User] = []
            var resolved = 0
            if let scope = ModerationRows.scope(of: request) {
                reporters = try User.fetchAll(db, sql: """
                    SELECT * FROM users WHERE id IN (SELECT reporter_id FROM reports WHERE status = 'open' AND \(scope.condition)) ORDER BY id
                    """, arguments: [scope.value])
                try db.execute(
                    sql: "UPDATE reports SET status = 'resolved', resolved_at = ? WHERE status = 'open' AND \(scope.condition)", arguments: [now, scope.value]
                )
                resolved = db.changesCount
            }
            let target = ModerationRows.target(of: report, postTitle: postTitle, userName: affected?.name)
            let entry = try Self.insert(
                ModerationLogEntry(
                    moderatorId: request.moderator.id, moderatorName: request.moderator.name, action: request.action, reportId: report.id,
                    postId: report.postId, userId: report.userId, about: target, in: request.language, note: request.note, createdAt: now
                ), into: db
            )
            for mail in mails(affected, reporters, target) { try MailOutboxRows.insert(mail, into: db, now: now) }
            return ModerationOutcome(resolved: resolved, postIDs: postIDs, entry: entry)
        }
    }

    func log(_ entry: ModerationLogEntry) async throws {
        _ = try await database.write { db in try Self.insert(entry, into: db) }
    }

    private static func insert(_ entry: ModerationLogEntry, into db: Database) throws -> ModerationLogEntry {
        try db.execute(sql: """
            INSERT INTO moderation_actions (
                moderator_id, moderator_name, action, report_id, post_id, user_id, target, target_kind, target_title, target_name, note, created_at
            )
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [
                entry.moderatorId, entry.moderatorName, entry.action.rawValue, entry.reportId, entry.postId, entry.userId, entry.target,
                entry.about?.kind.rawValue, entry.about?.postTitle, entry.about?.name, entry.note, entry.createdAt,
            ])
        return entry.with(id: db.lastInsertedRowID)
    }

    func auditLog(limit: Int) async throws -> [ModerationLogEntry] {
        try database.readNow { db in
            try Row.fetchAll(db, sql: "SELECT * FROM moderation_actions ORDER BY created_at DESC, id DESC LIMIT ?", arguments: [limit]).map { row in
                ModerationLogEntry(
                    id: row["id"], moderatorId: row["moderator_id"], moderatorName: row["moderator_name"],
                    action: ModerationAction(rawValue: row["action"]) ?? .dismiss, reportId: row["report_id"], postId: row["post_id"],
                    userId: row["user_id"], target: row["target"],
                    about: ModerationRows.about(kind: row["target_kind"], title: row["target_title"], name: row["target_name"]), note: row["note"],
                    createdAt: row["created_at"]
                )
            }
        }
    }

    func openReports() async throws -> (count: Int, oldest: Date?) {
        try database.readNow { db in
            let row = try Row.fetchOne(db, sql: "SELECT count(*) AS open, min(created_at) AS oldest FROM reports WHERE status = 'open'")
            return (row?["open"] ?? 0, row?["oldest"])
        }
    }

    func purgeRemovedPosts(before date: Date) async throws -> [Int64] {
        try await database.write { db in
            let ids = try Int64.fetchAll(db, sql: "SELECT id FROM posts WHERE hidden = 'removed' AND hidden_at < ?", arguments: [date])
            for id in ids { try Post.deleteOne(db, key: id) }
            return ids
        }
    }
}

struct PostgresModerationStorage: ModerationStorage {
    let store: PostgresStore

    func reports(status: Report.Status, limit: Int) async throws -> [ReportRecord] {
        try await store.query("""
            SELECT \(unescaped: ModerationRows.reportColumns) FROM reports \(unescaped: ModerationRows.reportJoins)
            WHERE reports.status = \(status.rawValue) ORDER BY reports.created_at \(unescaped: status == .open ? "ASC" : "DESC"), reports.id LIMIT \(limit)
            """).map { row in
            let columns = row.makeRandomAccess()
            return ReportRecord(
                report: try PostgresReportStorage.report(columns), reporterName: try columns["reporter_name"].decode(String?.self),
                reportedName: try columns["reported_name"].decode(String?.self),
                reportedSuspended: try columns["reported_suspended_at"].decode(Date?.self) != nil,
                postState: ModerationRows.postState(
                    id: try columns["current_post_id"].decode(Int64?.self), hidden: try columns["current_post_hidden"].decode(String?.self)
                )
            )
        }
    }

    func report(id: Int64) async throws -> Report? {
        try await store.query("SELECT * FROM reports WHERE id = \(id)").first.map { try PostgresReportStorage.report($0.makeRandomAccess()) }
    }

    func keptPicture(of reportId: Int64) async throws -> (contentType: String, bytes: ByteBuffer)? {
        try await store.query("SELECT content_type, bytes FROM report_pictures WHERE report_id = \(reportId)").first?.decode((String, ByteBuffer).self)
    }

    func act(_ request: ModerationRequest, now: Date, mails: @escaping ModerationMails) async throws -> ModerationOutcome? {
        let logger = store.logger
        return try await store.transaction { connection in
            let report = request.report
            var postTitle: String?
            var postIDs: [Int64] = []
            if let postId = report.postId {
                // Locked: two moderators acting on one post at once act one after the other.
                postTitle = try await connection.run("SELECT title FROM posts WHERE id = \(postId) FOR UPDATE", logger: logger).first?.decode(String.self)
            }
            if request.action.needsPost {
                guard let postId = report.postId, postTitle != nil else { return nil }
                if let change = ModerationRows.postChange(request.action) {
                    let hiddenAt: Date? = change.to == nil ? nil : now
                    let changed = try await connection.run("""
                        UPDATE posts SET hidden = \(change.to?.rawValue), hidden_at = \(hiddenAt) WHERE id = \(postId) AND (\(unescaped: change.from))
                        RETURNING id
                        """, logger: logger)
                    if !changed.isEmpty { postIDs = [postId] }
                }
            }
            var affected: User?
            if let userId = report.userId {
                affected = try await connection.run("SELECT * FROM users WHERE id = \(userId)", logger: logger).first.map {
                    try PostgresUsers.user($0.makeRandomAccess())
                }
            }
            if request.action.coversThePerson {
                guard let userId = affected?.id else { return nil }
                let suspendedAt: Date? = request.action == .suspendUser ? now : nil
                try await connection.run("UPDATE users SET suspended_at = \(suspendedAt) WHERE id = \(userId)", logger: logger)
                postIDs = try await connection.run("SELECT id FROM posts WHERE author_id = \(userId) AND hidden IS NULL", logger: logger).map {
                    try $0.decode(Int64.self)
                }
            }
            var reporters: [User] = []
            var resolved = 0
            if let scope = ModerationRows.scope(of: request) {
                let condition = scope.condition.replacingOccurrences(of: "?", with: "$1")
                var bindings = PostgresBindings()
                bindings.append(scope.value)
                reporters = try await connection.run(PostgresQuery(
                    unsafeSQL: "SELECT * FROM users WHERE id IN (SELECT reporter_id FROM reports WHERE status = 'open' AND \(condition)) ORDER BY id",
                    binds: bindings
                ), logger: logger).map { try PostgresUsers.user($0.makeRandomAccess()) }
                var resolving = PostgresBindings()
                resolving.append(scope.value)
                resolving.append(now)
                resolved = try await connection.run(PostgresQuery(
                    unsafeSQL: "UPDATE reports SET status = 'resolved', resolved_at = $2 WHERE status = 'open' AND \(condition) RETURNING id",
                    binds: resolving
                ), logger: logger).count
            }
            let target = ModerationRows.target(of: report, postTitle: postTitle, userName: affected?.name)
            let entry = try await Self.insert(
                ModerationLogEntry(
                    moderatorId: request.moderator.id, moderatorName: request.moderator.name, action: request.action, reportId: report.id,
                    postId: report.postId, userId: report.userId, about: target, in: request.language, note: request.note, createdAt: now
                ), on: connection, logger: logger
            )
            for mail in mails(affected, reporters, target) { try await MailOutboxRows.insert(mail, into: connection, logger: logger, now: now) }
            return ModerationOutcome(resolved: resolved, postIDs: postIDs, entry: entry)
        }
    }

    func log(_ entry: ModerationLogEntry) async throws {
        let logger = store.logger
        _ = try await store.transaction { connection in try await Self.insert(entry, on: connection, logger: logger) }
    }

    private static func insert(_ entry: ModerationLogEntry, on connection: PostgresConnection, logger: Logger) async throws -> ModerationLogEntry {
        let id = try await connection.run("""
            INSERT INTO moderation_actions (
                moderator_id, moderator_name, action, report_id, post_id, user_id, target, target_kind, target_title, target_name, note, created_at
            )
            VALUES (\(entry.moderatorId), \(entry.moderatorName), \(entry.action.rawValue), \(entry.reportId), \(entry.postId), \(entry.userId),
            \(entry.target), \(entry.about?.kind.rawValue), \(entry.about?.postTitle), \(entry.about?.name), \(entry.note), \(entry.createdAt)) RETURNING id
            """, logger: logger)[0].decode(Int64.self)
        return entry.with(id: id)
    }

    func auditLog(limit: Int) async throws -> [ModerationLogEntry] {
        try await store.query("SELECT * FROM moderation_actions ORDER BY created_at DESC, id DESC LIMIT \(limit)").map { row in
            let row = row.makeRandomAccess()
            return ModerationLogEntry(
                id: try row["id"].decode(Int64.self), moderatorId: try row["moderator_id"].decode(Int64?.self),
                moderatorName: try row["moderator_name"].decode(String.self),
                action: ModerationAction(rawValue: try row["action"].decode(String.self)) ?? .dismiss, reportId: try row["report_id"].decode(Int64?.self),
                postId: try row["post_id"].decode(Int64?.self), userId: try row["user_id"].decode(Int64?.self), target: try row["target"].decode(String.self),
                about: ModerationRows.about(
                    kind: try row["target_kind"].decode(String?.self), title: try row["target_title"].decode(String?.self),
                    name: try row["target_name"].decode(String?.self)
                ),
                note: try row["note"].decode(String.self), createdAt: try row["created_at"].decode(Date.self)
            )
        }
    }

    func openReports() async throws -> (count: Int, oldest: Date?) {
        let row = try await store.query("SELECT count(*), min(created_at) FROM reports WHERE status = 'open'")[0]
        let (count, oldest) = try row.decode((Int, Date?).self)
        return (count, oldest)
    }

    func purgeRemovedPosts(before date: Date) async throws -> [Int64] {
        try await store.query("DELETE FROM posts WHERE hidden = 'removed' AND hidden_at < \(date) RETURNING id").map { try $0.decode(Int64.self) }
    }
}

extension ModerationLogEntry {
    func with(id: Int64) -> ModerationLogEntry {
        ModerationLogEntry(
            id: id, moderatorId: moderatorId, moderatorName: moderatorName, action: action, reportId: reportId, postId: postId, userId: userId,
            target: target, about: about, note: note, createdAt: createdAt
        )
    }
}
