import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import Foyer
@testable import FoyerServer

/// The drain's settings and what a draining instance answers. (The drain itself, the listening socket and systemd's
/// are tested against real processes: Tests/Interop/test_deploying.py.)
@Suite struct DeployingTests {
    @Test func drainSettingsComeFromFlagsOrTheEnvironmentAndZeroIsASetting() throws {
        let defaults = try DeployOptions.parse([]).settings(environment: [:])
        #expect(defaults.drainDelay == .seconds(5) && defaults.shutdownGrace == .seconds(30) && defaults.inheritedListener == nil)
        let fromEnvironment = try DeployOptions.parse([]).settings(environment: ["FOYER_DRAIN_DELAY": "0", "FOYER_SHUTDOWN_GRACE": "1m"])
        #expect(fromEnvironment.drainDelay == .zero && fromEnvironment.shutdownGrace == .seconds(60))
        let flagWins = try DeployOptions.parse(["--drain-delay", "2.5s"]).settings(environment: ["FOYER_DRAIN_DELAY": "9"])
        #expect(flagWins.drainDelay == .milliseconds(2_500))
        #expect(throws: (any Error).self) { try DeployOptions.parse(["--shutdown-grace", "soon"]).settings(environment: [:]) }
        #expect(throws: (any Error).self) { try DeployOptions.parse(["--drain-delay", "-1"]).settings(environment: [:]) }
    }

    @Test func aSocketPassedBySystemdIsTakenOnlyWhenItNamesThisProcess() {
        let this = String(getpid())
        #expect(DeploySettings.systemdListener(environment: ["LISTEN_PID": this, "LISTEN_FDS": "1"]) == 3)
        #expect(DeploySettings.systemdListener(environment: ["LISTEN_PID": String(getpid() + 1), "LISTEN_FDS": "1"]) == nil)
        #expect(DeploySettings.systemdListener(environment: ["LISTEN_PID": this, "LISTEN_FDS": "0"]) == nil)
        #expect(DeploySettings.systemdListener(environment: ["LISTEN_FDS": "1"]) == nil)
    }

    @Test func endingsFallWithinNineTenthsOfTheGraceAndNoGraceMeansAtOnce() {
        let spread = Drain(settings: { var settings = DeploySettings(); settings.shutdownGrace = .seconds(10); return settings }())
        let delays = (0..<200).map { _ in spread.endingDelay() }
        #expect(delays.allSatisfy { $0 >= .zero && $0 <= .milliseconds(9_000) })
        #expect(Set(delays.map(\.nanoseconds)).count > 100, "each its own moment")
        let atOnce = Drain(settings: { var settings = DeploySettings(); settings.shutdownGrace = .zero; return settings }())
        #expect(atOnce.endingDelay() == .zero)
    }

    /// From the signal on, `/healthz` says so (a balancer stops sending), while requests are still answered, each
    /// closing its connection.
    @Test func aDrainingInstanceFailsItsHealthCheckAndClosesEachConnection() async throws {
        let store = try await Store.fresh(.sqlite)
        let drain = Drain(settings: DeploySettings())
        let router = FoyerRouter(options: .autoGenerateHeadEndpoints)
        HealthController(store: store, readiness: Readiness(), drain: drain).addRoutes(to: router)
        let app = Application(responder: DrainingResponder(wrapped: router.router.buildResponder(), drain: drain))
        try await app.test(.router) { client in
            try await client.execute(uri: "/healthz", method: .get) { response in
                #expect(response.status == .ok && response.headers[.connection] == nil)
            }
            drain.begin()
            try await client.execute(uri: "/healthz", method: .get) { response in
                #expect(response.status == .serviceUnavailable && String(buffer: response.body).contains(#""status":"draining""#))
            }
            try await client.execute(uri: "/up", method: .get) { response in
                #expect(response.status == .ok && response.headers[.connection] == "close")
            }
        }
    }
}
