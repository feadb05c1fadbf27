extension Duration {
    /// As a number of seconds, for settings and SQL intervals.
    @inlinable public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
