/// A problem found while starting: stops start-up with a message that names it.
public struct StartupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
