import Foundation
import Hummingbird
import Mustache

/// Times as the person reading a page says them: "just now", "3 minutes ago", "yesterday at 2:05 PM", "há 3 minutos",
/// "昨天 14:05", in their language and time zone (the `tz` cookie `live.js` sets from the browser's; UTC until it
/// has). Rendered on the server, so a page needs no script to show them; the exact time is the `<time>` element's
/// title. Foundation's formatters say the numbers, units, days and months; the catalogs the words around them.
struct ReaderTime: Sendable {
    static let cookieName = "tz"

    let now: Date
    let timeZone: TimeZone
    /// The zone's name, for cache keys.
    let zoneName: String
    let language: Language

    init(now: Date = Date(), timeZone: TimeZone? = nil, language: Language) {
        self.now = now
        self.timeZone = timeZone ?? .gmt
        zoneName = timeZone?.identifier ?? "GMT"
        self.language = language
    }

    /// The reader's clock for a request: its `tz` cookie when that names a zone this machine knows.
    init(_ request: Request, language: Language, now: Date = Date()) {
        guard let value = request.cookie(named: Self.cookieName), value.utf8.count <= 64,
            let zone = TimeZone(identifier: value.removingPercentEncoding ?? value)
        else {
            self.init(now: now, language: language)
            return
        }
        self.init(now: now, timeZone: zone, language: language)
    }

    /// What a page shows of `date`.
    func view(of date: Date) -> TimeView {
        TimeView(datetime: date.formatted(.iso8601), exact: exact(date), relative: relative(date))
    }

    private var locale: Locale { language.locale }

    func relative(_ date: Date) -> String {
        let seconds = now.timeIntervalSince(date)
        if seconds < 60 { return language.text("time.just_now") }
        if seconds < 3600 { return ago(date, seconds: seconds, unit: 60) }
        let calendar = self.calendar
        let days = calendar.dateComponents([.day], from: calendar.startOfDay(for: date), to: calendar.startOfDay(for: now)).day ?? 0
        // Formatted only where it is said: most times on a page are hours ago.
        var time: String { format(date, Date.FormatStyle(date: .omitted, time: .shortened)) }
        switch days {
        case ...0: return ago(date, seconds: seconds, unit: 3600)
        case 1: return language.text("time.yesterday_at", ["time": time])
        case 2...6: return language.text("time.day_at", ["day": format(date, Date.FormatStyle().weekday(.wide)), "time": time])
        default:
            if calendar.component(.year, from: date) == calendar.component(.year, from: now) {
                return language.text("time.day_at", ["day": format(date, Date.FormatStyle().day().month(.abbreviated)), "time": time])
            }
            return format(date, Date.FormatStyle().day().month(.abbreviated).year())
        }
    }

    /// "Nov 23, 2026, 2:05:09 PM UTC": for a title, where every second counts.
    /// A post's times are shown again on every view of it: each is kept once said, for its zone and language.
    func exact(_ date: Date) -> String {
        Self.exactSaid.value(for: ExactKey(date: date, zone: zoneName, language: language.tag)) {
            let zone = timeZone.identifier == "GMT" ? "UTC" : timeZone.abbreviation(for: date) ?? timeZone.identifier
            return format(date, Date.FormatStyle(date: .abbreviated, time: .standard)) + " " + zone
        }
    }

    private struct ExactKey: Hashable, Sendable {
        let date: Date
        let zone: String
        let language: String
    }

    private static let exactSaid = StartOverCache<ExactKey, String>(maximumCost: 16_384)

    /// Whole minutes or hours ago, as the locale says it ("3 minutes ago", "há 3 minutos", "3分钟前"). Foundation's
    /// style counts from the clock's now, so it is given a date that many whole units before that. The words for a
    /// count are the same every time (the zone does not change them), and working them out through a calendar was a
    /// tenth of a post's page: each is kept once said.
    private func ago(_ date: Date, seconds: TimeInterval, unit: TimeInterval) -> String {
        let count = Int((seconds / unit).rounded(.down))
        return Self.agoSaid.value(for: AgoKey(language: language.tag, unit: Int(unit), count: count)) {
            var style = Date.RelativeFormatStyle(presentation: .numeric, unitsStyle: .wide, capitalizationContext: .middleOfSentence)
            style.locale = locale
            style.calendar = calendar
            return Date().addingTimeInterval(-Double(count) * unit).formatted(style)
        }
    }

    private struct AgoKey: Hashable, Sendable {
        let language: String
        let unit: Int
        let count: Int
    }

    /// Minutes and hours below a day: a few dozen for each language.
    private static let agoSaid = StartOverCache<AgoKey, String>(maximumCost: 4_096)

    private func format(_ date: Date, _ style: Date.FormatStyle) -> String {
        var style = style
        style.locale = locale
        style.timeZone = timeZone
        style.calendar = calendar
        return date.formatted(style)
    }

    private var calendar: Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        calendar.locale = locale
        return calendar
    }
}

/// A time as templates show it: `<time datetime="{{datetime}}" title="{{exact}}">{{relative}}</time>`.
struct TimeView: Sendable {
    let datetime: String
    let exact: String
    let relative: String
}

/// Read by name without `Mirror` (see PostViews.swift).
extension TimeView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "datetime": datetime
        case "exact": exact
        case "relative": relative
        default: nil
        }
    }
}
