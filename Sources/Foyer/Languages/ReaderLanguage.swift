import Synchronization

/// One request's language, shared by every copy of its context: the account's setting once authentication knows
/// it, and the language chosen, once, for everything the request says. The error middleware sits outside
/// authentication (its copy of the context has no identity) and still answers in the language the handler spoke.
public final class ReaderLanguage: Sendable {
    private struct State {
        var accountLocale: String?
        var chosen: Language?
    }

    // A Mutex lives inside the object: one allocation a request, where a locked box was a second.
    private let state = Mutex(State())

    public init() {}

    /// The signed-in account's setting (nil: it has none).
    func signedIn(locale: String?) {
        state.withLock { $0 = State(accountLocale: locale, chosen: nil) }
    }

    /// The language chosen for this request, choosing it the first time from the account's setting.
    func language(choosing choose: (_ accountLocale: String?) -> Language) -> Language {
        let (locale, chosen) = state.withLock { ($0.accountLocale, $0.chosen) }
        if let chosen { return chosen }
        let language = choose(locale)
        state.withLock { $0.chosen = language }
        return language
    }
}
