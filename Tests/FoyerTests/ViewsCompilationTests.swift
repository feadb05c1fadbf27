import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import Foyer

/// Views are compiled once per process, whoever asks first: start-up's guess (`Views.compileAhead`) and the views
/// the configuration then asks for share one compilation when they agree.
@Suite struct ViewsCompilationTests {
    final class Made: Sendable {}

    @Test func whoeverAsksWhileTheViewsAreCompiledWaitsForThemInsteadOfCompilingAgain() async throws {
        let compilation = Compilation<Made>()
        let (started, release, secondDone) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let compiles = NIOLockedValueBox(0)
        let results = NIOLockedValueBox([ObjectIdentifier]())
        let first = Thread {
            let made = try! compilation.compiled {
                compiles.withLockedValue { $0 += 1 }
                started.signal()
                release.wait()
                return Made()
            }
            results.withLockedValue { $0.append(ObjectIdentifier(made)) }
        }
        first.start()
        started.wait()
        let second = Thread {
            let made = try! compilation.compiled {
                compiles.withLockedValue { $0 += 1 }
                return Made()
            }
            results.withLockedValue { $0.append(ObjectIdentifier(made)) }
            secondDone.signal()
        }
        second.start()
        // The second asker is still waiting while the first compiles (a second compilation would have returned).
        let waited = secondDone.wait(timeout: .now() + .milliseconds(300)) == .timedOut
        #expect(waited)
        release.signal()
        if waited { secondDone.wait() }
        while results.withLockedValue({ $0.count }) < 2 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(compiles.withLockedValue { $0 } == 1)
        let identities = results.withLockedValue { $0 }
        #expect(identities.count == 2 && identities[0] == identities[1])
    }

    @Test func aCompilationThatFailedIsMadeAgainByTheNextToAsk() throws {
        struct Broken: Error {}
        let compilation = Compilation<Made>()
        #expect(throws: Broken.self) { try compilation.compiled { throw Broken() } }
        let made = try compilation.compiled { Made() }
        #expect(try compilation.compiled { Made() } === made)
    }
}
