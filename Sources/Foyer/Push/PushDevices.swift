import Foundation
import GRDB

/// A device registered for notifications through Foyer, and where its registration at Unified Push stands.
struct PushDevice: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "push_devices"
    static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    enum State: String, Codable, Sendable {
        /// Stored here, waiting for Unified Push to take it.
        case pending
        case registered
    }

    var token: String
    var userId: Int64
    var sessionId: String?
    var platform: PushSettings.Platform
    var operatingSystem: String?
    var osVersion: String?
    /// A JSON array of strings.
    var categories: String
    var state: State
    var createdAt: Date
    var updatedAt: Date

    var categoryList: [String] { (try? JSONDecoder().decode([String].self, from: Data(categories.utf8))) ?? [] }
}

/// One thing Unified Push must hear, kept until it did (the outbox), so nothing is lost while it is away.
struct PushOperation: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "push_outbox"
    static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    enum Kind: String, Codable, Sendable {
        case register, unregister, send
    }

    var id: Int64?
    var operation: Kind
    var deviceToken: String?
    var platform: PushSettings.Platform?
    var oldDeviceToken: String?
    /// The JSON body UPS gets (registrations and messages).
    var body: Data?
    var attempts: Int
    var lastError: String?
    var createdAt: Date

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }

    static func unregister(_ device: PushDevice, now: Date) -> PushOperation {
        PushOperation(operation: .unregister, deviceToken: device.token, platform: device.platform, body: nil, attempts: 0, createdAt: now)
    }
}

/// What an app asks to register: already checked (DevicesAPIController).
struct DeviceRegistration: Sendable {
    var token: String
    var platform: PushSettings.Platform
    var operatingSystem: String?
    var osVersion: String?
    var categories: [String]
    var oldToken: String?
}

/// Devices and the outbox, kept together: every change to a device and what UPS must hear of it are one transaction.
struct PushDevices: Sendable {
    let database: any DatabaseWriter

    /// Stores the device as pending and queues its registration; a newer intention for a token replaces any older
    /// one still queued. Throws 422 for a token (or old token) registered by another user.
    func register(_ registration: DeviceRegistration, userId: Int64, sessionId: String?, now: Date = Date()) async throws -> (PushDevice, operation: Int64) {
        try await database.write { db in
            for (token, field) in [(registration.token, "device_token"), (registration.oldToken, "old_device_token")] {
                guard let token, let holder = try PushDevice.fetchOne(db, key: token), holder.userId != userId else { continue }
                throw ValidationFailed(errors: [field: ["is registered to another account; sign that account out on the device first"]])
            }
            let existing = try PushDevice.fetchOne(db, key: registration.token)
            if let old = registration.oldToken, old != registration.token {
                // UPS drops the old token itself when told of it (x-ag-old-token).
                try PushDevice.deleteOne(db, key: old)
                try Self.dropQueued(for: old, db)
            }
            try Self.dropQueued(for: registration.token, db)
            let device = PushDevice(
                token: registration.token, userId: userId, sessionId: sessionId, platform: registration.platform,
                operatingSystem: registration.operatingSystem, osVersion: registration.osVersion,
                categories: String(decoding: try JSONEncoder().encode(registration.categories), as: UTF8.self),
                state: .pending, createdAt: existing?.createdAt ?? now, updatedAt: now
            )
            try device.save(db)
            var operation = PushOperation(
                operation: .register, deviceToken: registration.token, platform: registration.platform,
                oldDeviceToken: registration.oldToken.flatMap { $0 == registration.token ? nil : $0 },
                body: try Self.registrationBody(device, alias: String(userId)), attempts: 0, createdAt: now
            )
            try operation.insert(db)
            return (device, operation.id!)
        }
    }

    /// Forgets the user's device and queues its removal at UPS; nil when the user has no device with that token.
    func unregister(token: String, userId: Int64, now: Date = Date()) async throws -> Int64? {
        try await database.write { db in
            guard let device = try PushDevice.fetchOne(db, key: token), device.userId == userId else { return nil }
            return try Self.remove([device], now: now, db).first
        }
    }

    /// Inside the transaction that ends sessions (sign-out, revocation, expiry): their devices are unregistered.
    static func sessionsEnding(_ sessionIDs: [String], db: Database, now: Date = Date()) throws {
        guard !sessionIDs.isEmpty else { return }
        let devices = try PushDevice.filter(sessionIDs.contains(Column("session_id"))).fetchAll(db)
        try remove(devices, now: now, db)
    }

    func list(userId: Int64) async throws -> [PushDevice] {
        try await database.read { db in
            try PushDevice.filter(Column("user_id") == userId).order(Column("created_at"), Column("token")).fetchAll(db)
        }
    }

    func device(token: String, userId: Int64) async throws -> PushDevice? {
        try await database.read { db in
            try PushDevice.filter(Column("token") == token && Column("user_id") == userId).fetchOne(db)
        }
    }

    /// Users with at least one device, but the one given (who made the change they would hear of).
    func recipients(excluding userId: Int64?) async throws -> [Int64] {
        try await database.read { db in
            try Int64.fetchAll(
                db, sql: "SELECT DISTINCT user_id FROM push_devices WHERE user_id IS NOT ? ORDER BY user_id", arguments: [userId]
            )
        }
    }

    func enqueue(messages: [Data], now: Date = Date()) async throws {
        try await database.write { db in
            for body in messages {
                var operation = PushOperation(operation: .send, body: body, attempts: 0, createdAt: now)
                try operation.insert(db)
            }
        }
    }

    // MARK: - The outbox, as the relay works through it

    /// The oldest queued operations, in the order they were made.
    func queued(limit: Int) async throws -> [PushOperation] {
        try await database.read { db in try PushOperation.order(Column("id")).limit(limit).fetchAll(db) }
    }

    /// UPS took it. A registration marks its device registered, unless a newer intention replaced it meanwhile.
    func delivered(_ operation: PushOperation, now: Date = Date()) async throws {
        try await database.write { db in
            guard try PushOperation.deleteOne(db, key: operation.id), operation.operation == .register, let token = operation.deviceToken else { return }
            try db.execute(
                sql: "UPDATE push_devices SET state = ?, updated_at = ? WHERE token = ? AND state = ?",
                arguments: [PushDevice.State.registered.rawValue, now, token, PushDevice.State.pending.rawValue]
            )
        }
    }

    /// UPS refused it for good, or it waited too long: it goes, and so does a device it was registering.
    func abandoned(_ operation: PushOperation) async throws {
        try await database.write { db in
            guard try PushOperation.deleteOne(db, key: operation.id), operation.operation == .register, let token = operation.deviceToken else { return }
            try db.execute(sql: "DELETE FROM push_devices WHERE token = ? AND state = ?", arguments: [token, PushDevice.State.pending.rawValue])
        }
    }

    func failed(_ operation: PushOperation, reason: String) async throws {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE push_outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?", arguments: [reason, operation.id]
            )
        }
    }

    // MARK: -

    /// Deletes the devices and queues their removal; returns the operations' ids.
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

    /// UPS's installation: `{deviceToken, deviceType, operatingSystem, osVersion, alias, categories}`.
    private static func registrationBody(_ device: PushDevice, alias: String) throws -> Data {
        struct Installation: Encodable {
            let deviceToken: String
            let deviceType: String
            let operatingSystem: String?
            let osVersion: String?
            let alias: String
            let categories: [String]
        }
        return try JSONEncoder().encode(Installation(
            deviceToken: device.token, deviceType: device.platform.rawValue,
            operatingSystem: device.operatingSystem ?? device.platform.displayName, osVersion: device.osVersion,
            alias: alias, categories: device.categoryList
        ))
    }
}
