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
struct PushDeviceRepository: Sendable {
    let store: Store
    let storage: any PushStorage

    init(store: Store) {
        self.store = store
        storage = store.pushStorage
    }

    /// Stores the device as pending and queues its registration; a newer intention for a token replaces any older
    /// one still queued. Throws 422 for a token (or old token) registered by another user.
    func register(_ registration: DeviceRegistration, userId: Int64, sessionId: String?, now: Date = Date()) async throws -> (PushDevice, operation: Int64) {
        let device = PushDevice(
            token: registration.token, userId: userId, sessionId: sessionId, platform: registration.platform,
            operatingSystem: registration.operatingSystem, osVersion: registration.osVersion,
            categories: String(decoding: try JSONEncoder().encode(registration.categories), as: UTF8.self),
            state: .pending, createdAt: now, updatedAt: now
        )
        // UPS drops the old token itself when told of it (x-ag-old-token).
        let oldToken = registration.oldToken.flatMap { $0 == registration.token ? nil : $0 }
        let operation = PushOperation(
            operation: .register, deviceToken: registration.token, platform: registration.platform, oldDeviceToken: oldToken,
            body: try Self.registrationBody(device, alias: String(userId)), attempts: 0, createdAt: now
        )
        return try await storage.register(device, replacing: registration.oldToken, operation: operation)
    }

    /// Forgets the user's device and queues its removal at UPS; nil when the user has no device with that token.
    func unregister(token: String, userId: Int64, now: Date = Date()) async throws -> Int64? {
        try await storage.unregister(token: token, userId: userId, now: now)
    }

    func list(userId: Int64) async throws -> [PushDevice] {
        try await storage.devices(userId: userId)
    }

    func device(token: String, userId: Int64) async throws -> PushDevice? {
        try await storage.device(token: token, userId: userId)
    }

    /// Users with at least one device, but the one given (who made the change they would hear of).
    func recipients(excluding userId: Int64?) async throws -> [Int64] {
        try await storage.usersWithDevices(excluding: userId)
    }

    func enqueue(messages: [Data], now: Date = Date()) async throws {
        try await storage.enqueue(messages.map { PushOperation(operation: .send, body: $0, attempts: 0, createdAt: now) })
    }

    // MARK: - The outbox, as the relay works through it

    /// The oldest queued operations, in the order they were made.
    func queued(limit: Int) async throws -> [PushOperation] {
        try await storage.queued(limit: limit)
    }

    /// UPS took it. A registration marks its device registered, unless a newer intention replaced it meanwhile.
    func delivered(_ operation: PushOperation, now: Date = Date()) async throws {
        try await storage.finish(operation, pendingDeviceBecomes: .registered, now: now)
    }

    /// UPS refused it for good, or it waited too long: it goes, and so does a device it was registering.
    func abandoned(_ operation: PushOperation) async throws {
        try await storage.finish(operation, pendingDeviceBecomes: nil, now: Date())
    }

    func failed(_ operation: PushOperation, reason: String) async throws {
        try await storage.failed(operation, reason: reason)
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
