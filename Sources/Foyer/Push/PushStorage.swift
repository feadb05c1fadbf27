import Foundation
import GRDB
import PostgresNIO

/// The rows behind `PushDeviceRepository`: devices and the outbox, changed together in one transaction.
protocol PushStorage: Sendable {
    /// Saves `device` (keeping its first `createdAt`) and queues `operation` in its place; an `oldToken`'s device
    /// goes. Whatever was queued for either token is dropped. Throws 422 when either token is another user's.
    func register(_ device: PushDevice, replacing oldToken: String?, operation: PushOperation) async throws -> (PushDevice, operation: Int64)
    /// Deletes the user's device and queues its removal; nil when the user has no device with that token.
    func unregister(token: String, userId: Int64, now: Date) async throws -> Int64?
    func devices(userId: Int64) async throws -> [PushDevice]
    func device(token: String, userId: Int64) async throws -> PushDevice?
    func usersWithDevices(excluding userId: Int64?) async throws -> [Int64]
    func enqueue(_ operations: [PushOperation]) async throws
    func queued(limit: Int) async throws -> [PushOperation]
    /// Deletes the operation; when it was there and registered a device still pending, the device becomes `state`
    /// (nil: the device goes).
    func finish(_ operation: PushOperation, pendingDeviceBecomes state: PushDevice.State?, now: Date) async throws
    func failed(_ operation: PushOperation, reason: String) async throws
}

extension Store {
    var pushStorage: any PushStorage { choose(sqlite: SQLitePushStorage.init, postgres: PostgresPushStorage.init) }
}

private func anotherAccount(_ field: String) -> ValidationFailed {
    ValidationFailed(errors: [field: [Phrase(verbatim: "is registered to another account; sign that account out on the device first")]])
}

struct SQLitePushStorage: PushStorage {
    let database: any DatabaseWriter

    func register(_ device: PushDevice, replacing oldToken: String?, operation: PushOperation) async throws -> (PushDevice, operation: Int64) {
        try await database.write { db in
            for (token, field) in [(device.token, "device_token"), (oldToken, "old_device_token")] {
                guard let token, let holder = try PushDevice.fetchOne(db, key: token), holder.userId != device.userId else { continue }
                throw anotherAccount(field)
            }
            var device = device
            if let existing = try PushDevice.fetchOne(db, key: device.token) { device.createdAt = existing.createdAt }
            if let oldToken, oldToken != device.token {
                try PushDevice.deleteOne(db, key: oldToken)
                try Self.dropQueued(for: oldToken, db)
            }
            try Self.dropQueued(for: device.token, db)
            try device.save(db)
            var operation = operation
            try operation.insert(db)
            return (device, operation.id!)
        }
    }

    func unregister(token: String, userId: Int64, now: Date) async throws -> Int64? {
        try await database.write { db in
            guard let device = try PushDevice.fetchOne(db, key: token), device.userId == userId else { return nil }
            return try Self.remove([device], now: now, db).first
        }
    }

    /// Inside the transaction that ends sessions (sign-out, revocation, expiry): their devices are unregistered.
    static func sessionsEnding(_ sessionIDs: [String], db: Database) throws {
        guard !sessionIDs.isEmpty else { return }
        try remove(try PushDevice.filter(sessionIDs.contains(Column("session_id"))).fetchAll(db), now: Date(), db)
    }

    func devices(userId: Int64) async throws -> [PushDevice] {
        try database.readNow { db in
            try PushDevice.filter(Column("user_id") == userId).order(Column("created_at"), Column("token")).fetchAll(db)
        }
    }

    func device(token: String, userId: Int64) async throws -> PushDevice? {
        try database.readStatementNow { db in try PushDevice.filter(Column("token") == token && Column("user_id") == userId).fetchOne(db) }
    }

    func usersWithDevices(excluding userId: Int64?) async throws -> [Int64] {
        try database.readNow { db in
            try Int64.fetchAll(db, sql: "SELECT DISTINCT user_id FROM push_devices WHERE user_id IS NOT ? ORDER BY user_id", arguments: [userId])
        }
    }

    func enqueue(_ operations: [PushOperation]) async throws {
        try await database.write { db in
            for var operation in operations { try operation.insert(db) }
        }
    }

    func queued(limit: Int) async throws -> [PushOperation] {
        try database.readNow { db in try PushOperation.order(Column("id")).limit(limit).fetchAll(db) }
    }

    func finish(_ operation: PushOperation, pendingDeviceBecomes state: PushDevice.State?, now: Date) async throws {
        try await database.write { db in
            guard try PushOperation.deleteOne(db, key: operation.id), operation.operation == .register, let token = operation.deviceToken else { return }
            let pending = PushDevice.State.pending.rawValue
            if let state {
                try db.execute(
                    sql: "UPDATE push_devices SET state = ?, updated_at = ? WHERE token = ? AND state = ?", arguments: [state.rawValue, now, token, pending]
                )
            } else {
                try db.execute(sql: "DELETE FROM push_devices WHERE token = ? AND state = ?", arguments: [token, pending])
            }
        }
    }

    func failed(_ operation: PushOperation, reason: String) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE push_outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?", arguments: [reason, operation.id])
        }
    }

    @discardableResult
    private static func remove(_ devices: [PushDevice], now: Date, _ db: Database) throws -> [Int64] {
        try devices.map { device in
            try device.delete(db)
            try dropQueued(for: device.token, db)
            var operation = PushOperation.unregister(device, now: now)
            try operation.insert(db)
            return operation.id!
        }
    }

    /// A registration or removal still queued for a token is superseded by a newer one.
    private static func dropQueued(for token: String, _ db: Database) throws {
        try db.execute(sql: "DELETE FROM push_outbox WHERE device_token = ? AND operation IN ('register', 'unregister')", arguments: [token])
    }
}

struct PostgresPushStorage: PushStorage {
    let store: PostgresStore

    func register(_ device: PushDevice, replacing oldToken: String?, operation: PushOperation) async throws -> (PushDevice, operation: Int64) {
        let logger = store.logger
        return try await store.transaction { connection in
            // Both tokens locked in one order, so two registrations swapping them cannot deadlock.
            for token in Set([device.token, oldToken].compactMap { $0 }).sorted() {
                try await connection.run("SELECT pg_advisory_xact_lock(hashtext('push device ' || \(token)))", logger: logger)
            }
            for (token, field) in [(device.token, "device_token"), (oldToken, "old_device_token")] {
                guard let token else { continue }
                let holders = try await connection.run("SELECT user_id FROM push_devices WHERE token = \(token)", logger: logger)
                if let holder = try holders.first?.decode(Int64.self), holder != device.userId { throw anotherAccount(field) }
            }
            if let oldToken, oldToken != device.token {
                try await connection.run("DELETE FROM push_devices WHERE token = \(oldToken)", logger: logger)
                try await Self.dropQueued(for: oldToken, connection, logger)
            }
            try await Self.dropQueued(for: device.token, connection, logger)
            let createdAt = try await connection.run("""
                INSERT INTO push_devices (token, user_id, session_id, platform, operating_system, os_version, categories, state, created_at, updated_at)
                VALUES (\(device.token), \(device.userId), \(device.sessionId), \(device.platform.rawValue), \(device.operatingSystem),
                \(device.osVersion), \(device.categories), \(device.state.rawValue), \(device.createdAt), \(device.updatedAt))
                ON CONFLICT (token) DO UPDATE SET user_id = excluded.user_id, session_id = excluded.session_id, platform = excluded.platform,
                operating_system = excluded.operating_system, os_version = excluded.os_version, categories = excluded.categories,
                state = excluded.state, updated_at = excluded.updated_at
                RETURNING created_at
                """, logger: logger)[0].decode(Date.self)
            var device = device
            device.createdAt = createdAt
            return (device, try await Self.insert(operation, connection, logger))
        }
    }

    func unregister(token: String, userId: Int64, now: Date) async throws -> Int64? {
        let logger = store.logger
        return try await store.transaction { connection in
            let devices = try await connection.run(
                "DELETE FROM push_devices WHERE token = \(token) AND user_id = \(userId) RETURNING *", logger: logger
            ).map(Self.device)
            return try await Self.queueRemoval(of: devices, now: now, connection, logger).first
        }
    }

    /// Inside the transaction that ends sessions (sign-out, revocation, expiry): their devices are unregistered.
    static func sessionsEnding(_ sessionIDs: [String], connection: PostgresConnection, logger: Logger) async throws {
        guard !sessionIDs.isEmpty else { return }
        let devices = try await connection.run("DELETE FROM push_devices WHERE session_id = ANY(\(sessionIDs)) RETURNING *", logger: logger)
            .map(Self.device)
        try await queueRemoval(of: devices, now: Date(), connection, logger)
    }

    func devices(userId: Int64) async throws -> [PushDevice] {
        try await store.query("SELECT * FROM push_devices WHERE user_id = \(userId) ORDER BY created_at, token").map(Self.device)
    }

    func device(token: String, userId: Int64) async throws -> PushDevice? {
        try await store.query("SELECT * FROM push_devices WHERE token = \(token) AND user_id = \(userId)").first.map(Self.device)
    }

    func usersWithDevices(excluding userId: Int64?) async throws -> [Int64] {
        try await store.query("SELECT DISTINCT user_id FROM push_devices WHERE user_id IS DISTINCT FROM \(userId) ORDER BY user_id")
            .map { try $0.decode(Int64.self) }
    }

    func enqueue(_ operations: [PushOperation]) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            for operation in operations { _ = try await Self.insert(operation, connection, logger) }
        }
    }

    func queued(limit: Int) async throws -> [PushOperation] {
        try await store.query("SELECT * FROM push_outbox ORDER BY id LIMIT \(limit)").map { row in
            try row.makeRandomAccess().decode(PushOperation.self)
        }
    }

    func finish(_ operation: PushOperation, pendingDeviceBecomes state: PushDevice.State?, now: Date) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            let deleted = try await connection.run("DELETE FROM push_outbox WHERE id = \(operation.id) RETURNING id", logger: logger)
            guard !deleted.isEmpty, operation.operation == .register, let token = operation.deviceToken else { return }
            let pending = PushDevice.State.pending.rawValue
            if let state {
                try await connection.run(
                    "UPDATE push_devices SET state = \(state.rawValue), updated_at = \(now) WHERE token = \(token) AND state = \(pending)",
                    logger: logger
                )
            } else {
                try await connection.run("DELETE FROM push_devices WHERE token = \(token) AND state = \(pending)", logger: logger)
            }
        }
    }

    func failed(_ operation: PushOperation, reason: String) async throws {
        try await store.query("UPDATE push_outbox SET attempts = attempts + 1, last_error = \(reason) WHERE id = \(operation.id)")
    }

    @discardableResult
    private static func queueRemoval(of devices: [PushDevice], now: Date, _ connection: PostgresConnection, _ logger: Logger) async throws -> [Int64] {
        var ids: [Int64] = []
        for device in devices {
            try await dropQueued(for: device.token, connection, logger)
            ids.append(try await insert(PushOperation.unregister(device, now: now), connection, logger))
        }
        return ids
    }

    private static func dropQueued(for token: String, _ connection: PostgresConnection, _ logger: Logger) async throws {
        try await connection.run(
            "DELETE FROM push_outbox WHERE device_token = \(token) AND operation IN ('register', 'unregister')", logger: logger
        )
    }

    private static func insert(_ operation: PushOperation, _ connection: PostgresConnection, _ logger: Logger) async throws -> Int64 {
        try await connection.run("""
            INSERT INTO push_outbox (operation, device_token, platform, old_device_token, body, attempts, last_error, created_at)
            VALUES (\(operation.operation.rawValue), \(operation.deviceToken), \(operation.platform?.rawValue), \(operation.oldDeviceToken),
            \(operation.body), \(operation.attempts), \(operation.lastError), \(operation.createdAt)) RETURNING id
            """, logger: logger)[0].decode(Int64.self)
    }

    private static func device(_ row: PostgresRow) throws -> PushDevice {
        try row.makeRandomAccess().decode(PushDevice.self)
    }
}
