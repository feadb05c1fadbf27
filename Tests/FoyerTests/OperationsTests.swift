import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import Foyer
@testable import FoyerServer

@Suite struct OperationsTests {
    @Test func healthCheckQueriesTheDatabase() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/healthz", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.json()["database"] as? String == "ok")
            }
        }
    }

    @Test func upAnswersPlainText() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/up", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "text/plain; charset=utf-8")
                #expect(response.text == "OK")
            }
        }
    }

    @Test func requestIDIsEchoedOrGenerated() async throws {
        let harness = try await TestHarness()
        try await harness.test { client in
            try await client.execute(uri: "/healthz", method: .get, headers: [.xRequestID: "lb-1234-abcd"]) { response in
                #expect(response.headers[.xRequestID] == "lb-1234-abcd")
            }
            try await client.execute(uri: "/healthz", method: .get, headers: [.xRequestID: "bad id\twith <junk>"]) { response in
                let id = try #require(response.headers[.xRequestID])
                #expect(id != "bad id\twith <junk>" && !id.isEmpty)
            }
            try await client.execute(uri: "/no-such-page", method: .get) { response in
                #expect(response.headers[.xRequestID]?.isEmpty == false, "error responses carry the id too")
            }
        }
    }

    @Test func demoAccountIsCreatedOnlyOnAnEmptyDatabase() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let users = UserRepository(database: database, passwordHashCost: 4)
        let demo = FoyerConfig.DemoAccount(email: "demo@example.com", password: "demo password")
        try await demo.createIfNoUsers(in: users, logger: Logger(label: "test"))
        #expect(try await users.authenticate(email: "demo@example.com", password: "demo password") != nil)
        try await FoyerConfig.DemoAccount(email: "second@example.com", password: "another one").createIfNoUsers(in: users, logger: Logger(label: "test"))
        #expect(try await users.count() == 1)
    }

    /// Its password hash would take a core from the server while it starts: the demo account waits for the socket
    /// to listen, and a server stopped before that makes none.
    @Test func theDemoAccountIsMadeOnceTheServerListens() async throws {
        let store = Store.sqlite(try SQLiteStore.openAndMigrate(path: ":memory:"))
        let users = UserRepository(store: store, passwordHashCost: 4)
        let (readiness, listening) = (Readiness(ready: false), ServerListening())
        let seeding = DemoSeeding(
            account: .init(email: "demo@example.com", password: "demo password"), users: users,
            posts: PostRepository(store: store, blocks: Blocks(store: store), onChange: { _ in }), readiness: readiness,
            listening: listening, logger: Logger(label: "test")
        )
        let stoppedEarly = Task { try await seeding.run() }
        stoppedEarly.cancel()
        try await stoppedEarly.value
        #expect(try await users.count() == 0)
        #expect(!readiness.isReady)

        let seeded = Task { try await seeding.run() }
        listening.listened()
        while !readiness.isReady { try await Task.sleep(for: .milliseconds(5)) }
        #expect(try await users.authenticate(email: "demo@example.com", password: "demo password") != nil)
        seeded.cancel()
        try await seeded.value
    }

    @Test func generatedDemoPasswordWorks() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let users = UserRepository(database: database, passwordHashCost: 4)
        try await FoyerConfig.DemoAccount(email: "demo@example.com").createIfNoUsers(in: users, logger: Logger(label: "test"))
        #expect(try await users.count() == 1)
        #expect(try await users.authenticate(email: "demo@example.com", password: "") == nil)
    }

    @Test func accountsRejectBadEmailsShortPasswordsAndDuplicates() async throws {
        let database = try SQLiteStore.openAndMigrate(path: ":memory:")
        let users = UserRepository(database: database, passwordHashCost: 4)
        try await users.create(email: "Ada@Example.com", password: "long enough")
        await #expect(throws: UserError.self) { try await users.create(email: "ada@example.com", password: "long enough") }
        await #expect(throws: UserError.self) { try await users.create(email: "not-an-email", password: "long enough") }
        await #expect(throws: UserError.self) { try await users.create(email: "x@y.z", password: "short") }
    }

    @Test func databaseFileIsInWALMode() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("foyer-\(UUID()).sqlite").path
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        let database = try SQLiteStore.openAndMigrate(path: path)
        let mode = try await database.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
        #expect(mode == "wal")
    }

    /// Letting go of start-up's code pages unmaps the executable mappings, and the code runs on from the page cache.
    @Test func startupCodePagesAreLetGoAndTheCodeRunsOn() throws {
        func executableResidentKB() throws -> Int {
            var total = 0, executable = false
            for line in try String(contentsOfFile: "/proc/self/smaps", encoding: .utf8).split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                if fields.first?.contains("-") == true, fields.count >= 5, !fields[0].hasSuffix(":") {
                    executable = fields[1] == "r-xp" && fields.count >= 6 && fields[5].hasPrefix("/")
                } else if executable, fields.first == "Rss:", let size = Int(fields[1]) {
                    total += size
                }
            }
            return total
        }
        let before = try executableResidentKB()
        #expect(StartupCodePages.release() > 0)
        let after = try executableResidentKB()
        #expect(after < before / 2, "resident executable pages: \(before) KB before, \(after) KB after")
        // What runs next faults its pages back in.
        #expect(String(decoding: try JSONEncoder().encode(["still": "running"]), as: UTF8.self) == #"{"still":"running"}"#)
    }
}

/// Freed memory given back after a burst of connections (`FreedMemoryTrim`).
@Suite struct FreedMemoryTrimTests {
    @Test func aBurstIsOverWhenAtLeast256HaveClosedAndAtMostHalfThePeakIsOpen() {
        #expect(FreedMemoryTrim.isBurstOver(peak: 5_000, open: 1))
        #expect(FreedMemoryTrim.isBurstOver(peak: 256, open: 0))
        #expect(!FreedMemoryTrim.isBurstOver(peak: 255, open: 0), "too few closed to be worth it")
        #expect(FreedMemoryTrim.isBurstOver(peak: 1_000, open: 500))
        #expect(!FreedMemoryTrim.isBurstOver(peak: 1_000, open: 501), "more than half still open: a steady load")
    }

    @Test func thePeakIsTheMostOpenSinceItWasLastTakenAndStartsAgainFromWhatIsOpen() {
        let connections = EdgeConnections(cap: 10, metrics: FoyerMetrics().server)
        for _ in 0..<5 { #expect(connections.open()) }
        for _ in 0..<4 { connections.closed() }
        #expect(connections.takePeak() == (peak: 5, open: 1))
        #expect(connections.takePeak() == (peak: 1, open: 1), "the next peak starts from the one still open")
        #expect(connections.open())
        connections.closed()
        #expect(connections.takePeak() == (peak: 2, open: 1))
    }

    /// A request's buffers, freed at a heap's top and taken again by the next request: with the trim threshold
    /// fixed above them their pages stay, and steady load faults none in. At glibc's default of 128 KB each round
    /// gave back the block's 150 pages and faulted them in again.
    @Test func aBlockTakenAgainAfterItIsFreedFaultsNoPagesIn() throws {
        FreedMemoryTrim.fixThresholds()
        func faults() -> Int {
            var usage = rusage()
            getrusage(__rusage_who_t(1), &usage)  // RUSAGE_THREAD, which Glibc's module leaves out
            return usage.ru_minflt
        }
        let size = 600 << 10  // above the default trim threshold, below the mmap threshold: from the heap
        let before = faults()
        for _ in 0..<200 {
            let block = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
            block.initializeMemory(as: UInt8.self, repeating: 1, count: size)
            block.deallocate()
        }
        let faulted = faults() - before
        #expect(faulted < 2_000, "\(faulted) pages faulted in over 200 rounds of a \(size >> 10) KB block")
    }

    /// What glibc keeps after many small blocks are freed below one still in use, and what a trim gives back.
    @Test func aTrimGivesBackFreedBlocksThatGlibcKept() throws {
        let count = 100_000
        var blocks = (0..<count).map { _ in UnsafeMutableRawPointer.allocate(byteCount: 1_000, alignment: 16) }
        for block in blocks { block.initializeMemory(as: UInt8.self, repeating: 1, count: 1_000) }
        let kept = blocks.removeLast()  // in use at the heap's top: free() alone cannot shrink the heap
        defer { kept.deallocate() }
        for block in blocks { block.deallocate() }
        let freed = FreedMemoryTrim.residentBytes()
        FreedMemoryTrim.trim()
        let trimmed = FreedMemoryTrim.residentBytes()
        #expect(freed - trimmed > 50 << 20, "resident \(freed >> 20) MB after freeing, \(trimmed >> 20) MB after the trim")
    }
}
