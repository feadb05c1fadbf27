import Foundation
import Testing

@testable import FoyerServer

struct StartupTimelineTests {
    /// Each step as its milliseconds since the timeline began, to one decimal, in the order reached.
    @Test func eachStepIsTheTimeSinceTheTimelineBegan() async throws {
        StartupTimeline.begin()
        try await Task.sleep(for: .milliseconds(20))
        StartupTimeline.reached("first")
        try await Task.sleep(for: .milliseconds(20))
        StartupTimeline.reached("second")
        let metadata = StartupTimeline.metadata
        let first = try #require(metadata["start.first_ms"].map { "\($0)" })
        let second = try #require(metadata["start.second_ms"].map { "\($0)" })
        for value in [first, second] { #expect(value.wholeMatch(of: /\d+\.\d/) != nil, "\(value)") }
        let (firstMs, secondMs) = (try #require(Double(first)), try #require(Double(second)))
        #expect(firstMs >= 20 && secondMs >= firstMs + 20)
    }
}
