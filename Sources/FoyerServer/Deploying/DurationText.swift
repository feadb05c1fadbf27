import ArgumentParser
import Foundation

/// Durations as flags and environment variables give them: `30d`, `12h`, `45m`, `90s` or a number of seconds.
public enum DurationText {
    /// The seconds `text` says; a `ValidationError` naming `option` when it says none. `allowingZero`: `0` is a
    /// setting of its own (no delay at all); otherwise a duration must be positive.
    public static func seconds(_ text: String, option: String, orOff: Bool = false, allowingZero: Bool = false) throws -> TimeInterval {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        let unit = trimmed.last.flatMap { units[$0] }
        let number = unit == nil ? trimmed : String(trimmed.dropLast())
        guard let value = Double(number), value > 0 || (allowingZero && value == 0), value.isFinite else {
            throw ValidationError("\(option): \"\(text)\" is not a duration; write e.g. 30d, 12h, 45m, 90s or a number of seconds\(orOff ? ", or off" : "")")
        }
        return value * (unit ?? 1)
    }
}
