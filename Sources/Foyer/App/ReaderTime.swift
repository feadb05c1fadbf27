import Foundation
import Hummingbird

/// Times as the person reading a page says them: "just now", "3 minutes ago", "yesterday at 14:05", in their time
/// zone (the `tz` cookie `live.js` sets from the browser's; UTC until it has). Rendered on the server, so a page
/// needs no script to show them; the exact time is the `<time>` element's title.
struct ReaderTime: Sendable {
    static let cookieName = "tz"

    let now: Date
    let timeZone: TimeZone
    /// The zone's name, for cache keys.
    let zoneName: String

    init(now: Date = Date(), timeZone: TimeZone? = nil) {
        self.now = now
        self.timeZone = timeZone ?? .gmt
        zoneName = timeZone?.identifier ?? "GMT"
    }

    /// The reader's clock for a request: its `tz` cookie when that names a zone this machine knows.
    init(_ request: Request, now: Date = Date()) {
        guard let value = request.rareCookie(Self.cookieName), value.utf8.count <= 64,
            let zone = TimeZone(identifier: value.removingPercentEncoding ?? value)
        else {
            self.init(now: now)
            return
        }
        self.init(now: now, timeZone: zone)
    }

    /// What a page shows of `date`.
    func view(of date: Date) -> TimeView {
        TimeView(datetime: date.formatted(.iso8601), exact: exact(date), relative: relative(date))
    }

    func relative(_ date: Date) -> String {
        let seconds = now.timeIntervalSince(date)
        if seconds < 60 { return "just now" }
        if seconds < 3600 {
            let minutes = Int(seconds / 60)
            return minutes == 1 ? "a minute ago" : "\(minutes) minutes ago"
        }
        let calendar = self.calendar
        let clock = self.clock(date)
        let days = calendar.dateComponents([.day], from: calendar.startOfDay(for: date), to: calendar.startOfDay(for: now)).day ?? 0
        switch days {
        case ...0:
            let hours = Int(seconds / 3600)
            return hours == 1 ? "an hour ago" : "\(hours) hours ago"
        case 1:
            return "yesterday at \(clock)"
        case 2...6:
            return "\(Self.weekdays[calendar.component(.weekday, from: date) - 1]) at \(clock)"
        default:
            let parts = calendar.dateComponents([.year, .month, .day], from: date)
            let day = "\(parts.day ?? 1) \(Self.months[(parts.month ?? 1) - 1])"
            return parts.year == calendar.component(.year, from: now) ? "\(day) at \(clock)" : "\(day) \(parts.year ?? 0)"
        }
    }

    /// "24 Nov 2026, 14:05:26 UTC": for a title, where every second counts.
    func exact(_ date: Date) -> String {
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let zone = timeZone.identifier == "GMT" ? "UTC" : timeZone.abbreviation(for: date) ?? timeZone.identifier
        return "\(parts.day ?? 1) \(Self.months[(parts.month ?? 1) - 1]) \(parts.year ?? 0), "
            + "\(Self.twoDigits(parts.hour)):\(Self.twoDigits(parts.minute)):\(Self.twoDigits(parts.second)) \(zone)"
    }

    private func clock(_ date: Date) -> String {
        let parts = calendar.dateComponents([.hour, .minute], from: date)
        return "\(Self.twoDigits(parts.hour)):\(Self.twoDigits(parts.minute))"
    }

    private var calendar: Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return calendar
    }

    private static func twoDigits(_ value: Int?) -> String {
        let value = value ?? 0
        return value < 10 ? "0\(value)" : "\(value)"
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let weekdays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
}

/// A time as templates show it: `<time datetime="{{datetime}}" title="{{exact}}">{{relative}}</time>`.
struct TimeView: Sendable {
    let datetime: String
    let exact: String
    let relative: String
}
