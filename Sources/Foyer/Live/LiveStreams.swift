import Foundation
import FoyerServer
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes
import Prometheus
import ServiceLifecycle

/// The streams pages follow, one LiveChannel per stream and language. Changes are rendered once per language into
/// `<turbo-stream>` HTML, framed once as a server-sent event, and the same bytes go to every subscriber of that
/// language.
final class LiveStreams: Sendable {
    /// What a page can follow. Task streams need a signed-in user; post streams are public like post pages.
    enum Stream: String, Sendable, CaseIterable {
        case tasks, posts

        var requiresSignIn: Bool { self == .tasks }
        /// The `<turbo-frame>` around the part of a page this stream keeps live.
        var frame: String { "\(rawValue)-live" }
    }

    /// A stream in one language: a page in Portuguese follows the Portuguese edition of `posts`, so what it is sent
    /// says its own words. Each edition is a channel of its own, numbered by the journal under its own name: `posts`
    /// in the default language (the name pages had before there were languages, which open pages still hold across
    /// a deploy), `posts@pt-BR` in another.
    struct Edition: Hashable, Sendable {
        let stream: Stream
        /// `Language.index`
        let language: Int
    }

    static let heartbeatInterval: Duration = .seconds(15)

    let names: StreamNames
    /// Event ids are `epoch-sequence`. With a journal, the store's epoch and numbers: the same on every instance
    /// sharing the store and across restarts. Without, this process's own: an id from before a restart names no
    /// event of ours, so it means "reload".
    let epoch: String
    let journal: LiveJournal?
    let languages: Languages
    let editions: [Edition]
    /// When each followed stream ends on a graceful shutdown, and what it tells its browser.
    let drain: Drain
    private let channels: [Edition: LiveChannel]
    /// The journal's name of each edition, and back.
    private let editionNames: [Edition: String]
    private let editionsByName: [String: Edition]
    /// Signed once: pages embed them on every render.
    private let paths: [Edition: String]
    private let namings: [Edition: Naming]
    /// The open streams of signed-in viewers, by viewer and subscriber: a block changes what each may be sent.
    private let viewing = NIOLockedValueBox([Int64: [UInt64: Viewed]]())

    private struct Viewed: Sendable {
        let edition: Edition
        let channel: LiveChannel
        let eventLoop: any EventLoop
    }

    /// An event stream that reconnected by itself (EventSource's `Last-Event-ID` header: after a restart, a deploy,
    /// a network change): it got the events it missed (`replayed`, none when it missed none), or its live frame
    /// loads again (`reloaded`: the id was from before a restart, or the events were gone from the window). A page's
    /// first connection resumes from the position it was rendered at (`?last_event_id=`) and is not counted.
    enum Resumed: String, Sendable, CaseIterable { case replayed, reloaded }
    private let resumed: @Sendable (Resumed) -> Void

    init(
        names: StreamNames, languages: Languages, journal: LiveJournal? = nil, drain: Drain = Drain(settings: .init()), limits: LiveChannel.Limits = .init(),
        resumed: @escaping @Sendable (Resumed) -> Void = { _ in }
    ) {
        self.names = names
        self.journal = journal
        self.drain = drain
        self.resumed = resumed
        self.languages = languages
        epoch = journal?.epoch ?? String(UInt32.random(in: .min ... .max), radix: 36)
        let editions = Stream.allCases.flatMap { stream in languages.all.map { Edition(stream: stream, language: $0.index) } }
        self.editions = editions
        channels = Dictionary(uniqueKeysWithValues: editions.map { ($0, LiveChannel(limits: limits)) })
        let editionNames = Dictionary(
            uniqueKeysWithValues: editions.map { edition in
                let language = languages.all[edition.language]
                return (edition, language === languages.fallback ? edition.stream.rawValue : "\(edition.stream.rawValue)@\(language.tag)")
            }
        )
        self.editionNames = editionNames
        editionsByName = Dictionary(uniqueKeysWithValues: editionNames.map { ($1, $0) })
        let signedNames = editionNames.mapValues(names.signed)
        paths = signedNames.mapValues { "/streams/" + $0 }
        namings = signedNames.mapValues(Naming.init(signedName:))
    }

    /// `stream` in `language`; in the default language when none is said.
    func edition(_ stream: Stream, in language: Language? = nil) -> Edition {
        Edition(stream: stream, language: (language ?? languages.fallback).index)
    }

    func channel(_ edition: Edition) -> LiveChannel { channels[edition]! }

    /// The signed name a page in `language` embeds, and the path it subscribes to.
    func path(of stream: Stream, in language: Language) -> String { paths[edition(stream, in: language)]! }

    /// The id of the newest event on `stream` in `language`. A page embeds it, read before the page reads its data,
    /// and resumes from it: whatever changed between the render and the stream's connection is replayed, and
    /// replaying a change the page already shows is harmless (each action leaves the page the same when applied twice).
    func position(of stream: Stream, in language: Language) -> String { eventID(channel(edition(stream, in: language)).latest) }

    func edition(signedName: String) -> Edition? { names.verify(signedName).flatMap { editionsByName[$0] } }

    /// Sends a change to every page following `stream`, on every instance (through the journal), rendered once in
    /// each language. `author`: whose words it carries; pages of people a block keeps apart from them are not sent it.
    func broadcast(on stream: Stream, author: Int64? = nil, rendering html: (Language) -> String) {
        for language in languages.all {
            let edition = edition(stream, in: language)
            let html = html(language)
            if let journal {
                journal.enqueue(.append(html: html, stream: editionNames[edition]!, author: author))
            } else {
                channel(edition).publish({ sequence in event(html, id: eventID(sequence)) }, author: author)
            }
        }
    }

    /// The same HTML to every page following `stream`, whatever its language: HTML that says no words.
    func broadcast(_ html: String, on stream: Stream, author: Int64? = nil) {
        broadcast(on: stream, author: author) { _ in html }
    }

    /// A viewer's blocks changed (here or on another instance): each of their open streams here is kept apart from
    /// `keptApart` from now on, and its live part loads again, without what it must no longer show.
    func keepApart(viewer: Int64, from keptApart: Set<Int64>) {
        let open = viewing.withLockedValue { $0[viewer] ?? [:] }
        for (subscriber, viewed) in open {
            // At the subscriber's own position, which it has had already: a page applies a reload all the same.
            viewed.channel.keepApart(subscriber: subscriber, on: viewed.eventLoop, from: keptApart) { cursor in
                self.reloadEvent(viewed.edition.stream, at: cursor)
            }
        }
    }

    /// Tells every page following `stream` to load its live part again: events were missed.
    func broadcastReload(on stream: Stream) {
        broadcast(TurboStream.reloadFrame(stream.frame), on: stream)
    }

    func heartbeat() { for channel in channels.values { channel.heartbeat() } }
    /// Event streams open now, on every stream.
    var subscriberCount: Int { channels.values.reduce(0) { $0 + $1.subscriberCount } }
    func closeAll() { for channel in channels.values { channel.close() } }

    /// Writes `edition` to one subscriber as server-sent events, as Turbo's `connectStreamSource` reads them.
    func serve(
        _ edition: Edition, lastEventID: String?, reconnected: Bool = false, heldBy hold: ((@escaping @Sendable () -> Void) -> SessionHolds.Release)? = nil,
        viewer: Viewer? = nil, open: Gauge? = nil, on connection: any Channel, to writer: inout any ResponseBodyWriter
    ) async throws {
        try await serve([(edition, lastEventID)], named: false, reconnected: reconnected, heldBy: hold, viewer: viewer, open: open, on: connection, to: &writer)
    }

    /// Who follows a stream, when signed in: the authors a block keeps them apart from are left out of what they are
    /// sent (replays included), until `keepApart(viewer:from:)` says otherwise.
    struct Viewer: Sendable {
        let userId: Int64
        let keptApart: Set<Int64>
    }

    /// Writes `followed` streams to one subscriber as server-sent events on one connection, until it goes away, lags
    /// too far behind on any of them, the server shuts down, or the session that opened it ends. `named`: each event
    /// says the stream it belongs to (`event: <signed name>`), which a connection following several needs (a browser
    /// whose tabs share one connection, Public/live.js); a single stream's events are plain `message`s as Turbo reads
    /// them. Each `lastEventID` resumes that stream: the missed events from the window, or a reload. `heldBy`: takes
    /// the connection's ending and gives back what releases the hold. `open` counts it while it lasts. The opening
    /// and any replay go through `writer`; from then on events are written by each channel's fan-out straight to
    /// `connection` (the channel the response is written on), so a change wakes no task per subscriber. When the
    /// connection can be handed over (`ConnectionHandover`, set by Foyer's HTTP loop) this returns at once and the
    /// connection's task ends: an idle stream then holds no task at all, and its ending (a last event, the
    /// response's end, the close) is written from the event loop.
    func serve(
        _ followed: [(edition: Edition, lastEventID: String?)], named: Bool, reconnected: Bool = false,
        heldBy hold: ((@escaping @Sendable () -> Void) -> SessionHolds.Release)? = nil, viewer: Viewer? = nil,
        open: Gauge? = nil, on connection: any Channel, to writer: inout any ResponseBodyWriter
    ) async throws {
        let subscriptions = followed.map { followed in
            let channel = channel(followed.edition)
            return Subscription(edition: followed.edition, channel: channel, subscriber: channel.subscribe())
        }
        let keptApart = viewer?.keptApart ?? []
        let release = hold?({ for subscription in subscriptions { subscription.channel.end(subscriber: subscription.subscriber) } })
        if let viewer {
            viewing.withLockedValue { viewing in
                for subscription in subscriptions {
                    viewing[viewer.userId, default: [:]][subscription.subscriber] = Viewed(
                        edition: subscription.edition, channel: subscription.channel, eventLoop: connection.eventLoop
                    )
                }
            }
        }
        open?.increment()
        let done: @Sendable () -> Void = { [viewing] in
            release?()
            if let viewer {
                viewing.withLockedValue { viewing in
                    for subscription in subscriptions { viewing[viewer.userId]?.removeValue(forKey: subscription.subscriber) }
                    if viewing[viewer.userId]?.isEmpty == true { viewing.removeValue(forKey: viewer.userId) }
                }
            }
            for subscription in subscriptions { subscription.channel.unsubscribe(subscription.subscriber) }
            open?.decrement()
        }
        var opening = ByteBuffer(string: "retry: 2000\n: \(followed.map(\.edition.stream.rawValue).joined(separator: " "))\n\n")
        var cursors: [UInt64] = []
        for (subscription, followed) in zip(subscriptions, followed) {
            let (events, cursor, outcome) = resume(subscription.edition, from: followed.lastEventID, keptApart: keptApart)
            for event in events { opening.writeImmutableBuffer(named ? self.named(subscription.edition).plain.frame(event) : event) }
            cursors.append(cursor)
            if reconnected, let outcome { resumed(outcome) }
        }
        do {
            try await writer.write(opening)
        } catch {
            done()
            throw error
        }
        // One heartbeat per connection, not one per stream it follows.
        func following(_ index: Int, write: @escaping @Sendable (ByteBuffer) -> Void, flush: (@Sendable () -> Void)?, framing: LiveChannel.Connection.Framing?)
            -> LiveChannel.Connection
        {
            LiveChannel.Connection(channel: connection, write: write, flush: flush, heartbeat: index == 0 ? Self.heartbeatComment : nil, framing: framing)
        }
        if let handover = ConnectionHandover.current {
            let drain = drain
            // On a graceful shutdown each connection ends at its own moment of the grace, so that its browser's
            // reconnect (to another instance) is not one of thousands in the same second.
            let handedOver = handover.take {
                connection.eventLoop.scheduleTask(in: drain.endingDelay()) {
                    for subscription in subscriptions { subscription.channel.stop(subscriber: subscription.subscriber, on: connection.eventLoop, .closed) }
                }
            }
            // Whichever stream stops first ends the connection; the others then stop as `gone`, and say nothing.
            let ended = NIOLockedValueBox(false)
            for (index, (subscription, cursor)) in zip(subscriptions, cursors).enumerated() {
                let framing = named ? self.named(subscription.edition).chunked : Self.chunked
                let connectionFollowing = following(index, write: handedOver.write, flush: handedOver.flush, framing: framing)
                subscription.channel.follow(connectionFollowing, after: cursor, subscriber: subscription.subscriber, keptApart: keptApart) { ending in
                    guard !ended.withLockedValue({ ended in defer { ended = true }; return ended }) else { return }
                    for other in subscriptions where other.edition != subscription.edition {
                        other.channel.stop(subscriber: other.subscriber, on: connection.eventLoop, .gone)
                    }
                    done()
                    // The connection's own end: its task is gone, so nothing else would write it.
                    if case .gone = ending { return }
                    if let last = self.lastEvent(ending, named: named) { handedOver.writeChunk(last) }
                    connection.writeAndFlush(HTTPResponsePart.end(nil)).whenComplete { _ in connection.close(promise: nil) }
                }
            }
            return
        }
        defer { done() }
        let ending = await withGracefulShutdownHandler {
            await withTaskGroup(of: LiveChannel.Ending.self) { group in
                for (index, (subscription, cursor)) in zip(subscriptions, cursors).enumerated() {
                    let connectionFollowing = following(
                        index, write: { connection.write(HTTPResponsePart.body($0), promise: nil) }, flush: nil, framing: named ? self.named(subscription.edition).plain : nil
                    )
                    group.addTask {
                        await subscription.channel.follow(connectionFollowing, after: cursor, subscriber: subscription.subscriber, keptApart: keptApart)
                    }
                }
                let first = await group.next() ?? .closed
                group.cancelAll()
                return first
            }
        } onGracefulShutdown: { [drain] in
            // As a handed-over connection: at its own moment of the grace, not with every other stream of the server.
            connection.eventLoop.scheduleTask(in: drain.endingDelay()) {
                for subscription in subscriptions { subscription.channel.stop(subscriber: subscription.subscriber, on: connection.eventLoop, .closed) }
            }
        }
        if let last = lastEvent(ending, named: named) { try await writer.write(last) }
        try await writer.finish(nil)
    }

    /// What a stream's connection says last, by why it ends. A session's end: EventSource would reconnect by itself,
    /// so the page's script closes it and goes to sign in. A graceful shutdown: EventSource reconnects after the last
    /// `retry:` it was told, a little apart from the others; a page that reconnects by itself (several streams: it
    /// says where each is) reads the same as an event.
    private func lastEvent(_ ending: LiveChannel.Ending, named: Bool) -> ByteBuffer? {
        switch ending {
        case .ended: return Self.signedOutEvent
        case .closed:
            let delay = drain.reconnectDelayMilliseconds()
            return ByteBuffer(string: named ? "retry: \(delay)\nevent: retry\ndata: \(delay)\n\n" : "retry: \(delay)\n\n")
        case .gone, .lagging, .cancelled: return nil
        }
    }

    private func named(_ edition: Edition) -> Naming { namings[edition]! }

    /// How a connection that follows several streams frames one's events: each after `event: <its signed name>`, which
    /// the page's EventSource dispatches by that name. Framed once per event for all such connections.
    private struct Naming: Sendable {
        let plain: LiveChannel.Connection.Framing
        let chunked: LiveChannel.Connection.Framing

        init(signedName: String) {
            let line = ByteBuffer(string: "event: \(signedName)\n")
            let frame: @Sendable (ByteBuffer) -> ByteBuffer = { payload in
                // A comment (the heartbeat) is no event.
                guard payload.readableBytesView.first != UInt8(ascii: ":") else { return payload }
                var named = ByteBufferAllocator().buffer(capacity: line.readableBytes + payload.readableBytes)
                named.writeImmutableBuffer(line)
                named.writeImmutableBuffer(payload)
                return named
            }
            plain = .init(key: "named-" + signedName, frame: frame)
            chunked = .init(key: "named-chunk-" + signedName, frame: { HandedOverConnection.chunk(frame($0)) })
        }
    }

    private struct Subscription: Sendable {
        let edition: Edition
        let channel: LiveChannel
        let subscriber: UInt64
    }

    /// What a reconnect (or a page resuming from where it was rendered) missed, or a reload; the sequence number the
    /// subscriber is then at; and whether it resumed (nil: it named no event).
    private func resume(_ edition: Edition, from lastEventID: String?, keptApart: Set<Int64>) -> (events: [ByteBuffer], cursor: UInt64, outcome: Resumed?) {
        let channel = channel(edition)
        let stream = edition.stream
        let cursor = channel.latest
        guard let lastEventID else { return ([], cursor, nil) }
        guard let last = sequence(of: lastEventID) else { return ([reloadEvent(stream, at: cursor)], cursor, .reloaded) }
        if last > cursor, journal != nil, last - cursor <= UInt64(channel.limits.window) {
            // Numbered by the journal, on an instance that has not read the latest events yet: it follows from
            // there, and the events it already has are skipped when this instance publishes them.
            return ([], last, .replayed)
        }
        guard last <= cursor else { return ([reloadEvent(stream, at: cursor)], cursor, .reloaded) }
        switch channel.available(after: last, excluding: keptApart) {
        case .event(let payload, let sequence): return ([payload], sequence, .replayed)
        case .events(let payloads, let through): return (payloads, through, .replayed)
        case .gap: return ([reloadEvent(stream, at: cursor)], cursor, .reloaded)
        // It missed nothing.
        case nil, .lagging, .heartbeat, .closed, .cancelled, .ended: return ([], cursor, .replayed)
        }
    }

    /// Every taken-over stream frames its events alike: as chunks of an HTTP/1.1 body.
    static let chunked = LiveChannel.Connection.Framing(key: "http-chunk", frame: HandedOverConnection.chunk)

    private static let heartbeatComment = ByteBuffer(string: ": heartbeat\n\n")
    /// The last event of a stream whose session ended: `Public/live.js` visits its data.
    static let signedOutEvent = ByteBuffer(string: "event: signed-out\ndata: /sign_in\n\n")

    private func eventID(_ sequence: UInt64) -> String { "\(epoch)-\(sequence)" }

    /// For one subscriber that missed events: its live frame loads again, and its id moves to `sequence`.
    private func reloadEvent(_ stream: Stream, at sequence: UInt64) -> ByteBuffer {
        event(TurboStream.reloadFrame(stream.frame), id: eventID(sequence))
    }

    private func sequence(of eventID: String) -> UInt64? {
        guard let dash = eventID.lastIndex(of: "-"), eventID[..<dash] == epoch else { return nil }
        return UInt64(eventID[eventID.index(after: dash)...])
    }

    /// One SSE event: its id, then the HTML as `data:` lines (a line break inside the HTML starts a new line).
    private func event(_ html: String, id: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(html.utf8.count + 64)
        buffer.writeString("id: \(id)\n")
        for line in html.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r" || $0 == "\r\n" }) {
            buffer.writeStaticString("data: ")
            buffer.writeSubstring(line)
            buffer.writeStaticString("\n")
        }
        buffer.writeStaticString("\n")
        return buffer
    }
}

extension LiveStreams {
    /// The window kept in the journal, before anything is published (at start): pages open before a restart
    /// resume from it.
    func loadJournal() async throws {
        guard let journal else { return }
        let now = Date()
        for edition in editions {
            let channel = channel(edition)
            let (events, latest) = try await journal.storage.events(of: editionNames[edition]!, after: 0, within: channel.limits)
            channel.load(
                events.map { ($0.sequence, event($0.html, id: eventID($0.sequence)), .seconds(max(0, now.timeIntervalSince($0.appendedAt))), $0.author) },
                latest: latest
            )
        }
    }

    /// The journal's work, one item at a time, until it is finished: this instance's events appended and published
    /// under the journal's numbers, after whatever other instances appended before them; theirs read when told.
    func keepJournal() async {
        guard let journal else { return }
        for await work in journal.work {
            switch work {
            case .append(let html, let name, let author):
                guard let edition = editionsByName[name] else { continue }
                let channel = channel(edition)
                do {
                    let sequence = try await journal.storage.append(html, to: name, author: author, keeping: channel.limits)
                    if sequence > channel.latest + 1 { await catchUp(edition, through: sequence - 1) }
                    channel.publish(event(html, id: eventID(sequence)), sequence: sequence, author: author)
                    journal.cluster?.send(LiveJournal.Appended(stream: name, sequence: sequence), on: LiveJournal.appended)
                } catch {
                    journal.logger.error(
                        "A live event could not be kept in the store: open pages miss it until they load again",
                        metadata: ["stream": .string(name), "error": .string("\(error)")]
                    )
                }
            case .catchUp(let name, let through):
                // A language another instance speaks and this one does not (a deploy adding one): nobody here follows it.
                guard let edition = editionsByName[name] else { continue }
                await catchUp(edition, through: through)
            case .catchUpEverything:
                for edition in editions { await catchUp(edition, through: nil) }
            }
        }
    }

    private func catchUp(_ edition: Edition, through: UInt64?) async {
        guard let journal else { return }
        let channel = channel(edition)
        let name = editionNames[edition]!
        if let through, through <= channel.latest { return }
        do {
            let (events, _) = try await journal.storage.events(of: name, after: channel.latest, within: channel.limits)
            for kept in events { channel.publish(event(kept.html, id: eventID(kept.sequence)), sequence: kept.sequence, author: kept.author) }
        } catch {
            journal.logger.warning(
                "Live events kept by another instance could not be read", metadata: ["stream": .string(name), "error": .string("\(error)")]
            )
        }
    }
}

/// Keeps idle streams alive (proxies and browsers drop silent connections) and the replay window trimmed.
struct LiveHeartbeatService: Service {
    let streams: LiveStreams

    func run() async {
        await cancelWhenGracefulShutdown {
            while (try? await Task.sleep(for: LiveStreams.heartbeatInterval)) != nil {
                streams.heartbeat()
            }
        }
    }
}
