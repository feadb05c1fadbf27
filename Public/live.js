// <turbo-stream-source src="…">: follows a server-sent-event stream of <turbo-stream> elements while the element
// is on the page, as Turbo 7.2+ does. Turbo 7.1 has Turbo.connectStreamSource but not the element; a newer Turbo
// defines its own, and this one stands aside.
//
// A browser's tabs share one connection: over HTTP/1.1 a browser opens at most six to one site, and a stream per tab
// would take them all at the sixth (every further page of the site would hang). One tab, the one holding the
// "foyer-live" Web Lock, follows every stream any tab shows on one connection (GET /streams?follow=…) and passes
// each event on over a BroadcastChannel; when it closes, the lock passes to another tab, which asks every tab where
// it is and follows on from there. Where either API is missing (Safari before 15.4), each page has its own
// EventSource, as before. Android WebView has both, but no SharedWorker, which is why this is not one.
//
// The id of the last event applied is kept on the element, so a page Turbo restores from its snapshot cache
// (Back) resumes from there instead of missing what changed while it was away.
// The words scripts show, in the page's language: the layout's #foyer-words (the catalogs' js.* messages), read
// when they are needed, since Turbo swaps the body (and the words with it) on every visit.
window.foyerWords = (key, values = {}) => {
  let words = {}
  try { words = JSON.parse(document.getElementById("foyer-words")?.textContent || "{}") } catch { words = {} }
  return (words[key] ?? key).replace(/\{\{\s*(\w+)\s*\}\}/g, (_, name) => String(values[name] ?? ""))
}

if (!customElements.get("turbo-stream-source")) {
  // Event ids are "epoch-number". An id is news to a page unless it is from the same epoch and not further on.
  const isAfter = (id, position) => {
    const [a, b] = [/^(.*)-(\d+)$/.exec(id || ""), /^(.*)-(\d+)$/.exec(position || "")]
    return !a || !b || a[1] !== b[1] || Number(a[2]) > Number(b[2])
  }
  const follows = (message, element) => message.name === element.name

  class StreamSource extends HTMLElement {
    connectedCallback() {
      // A preview from Turbo's cache is replaced by the real page at once: no need to connect for it.
      if (document.documentElement.hasAttribute("data-turbo-preview")) return
      this.url = new URL(this.getAttribute("src"), document.baseURI)
      this.name = this.url.pathname.split("/").pop()
      // The last event this page was given (applied on its next frame): later copies of it are not applied twice.
      this.received = this.dataset.lastEventId || ""
      this.frameLoaded = (event) => {
        const frame = event.target
        if (!this.eventsDuringReload || !frame.isConnected || !frame.hasAttribute("data-live-reload")) return
        const events = this.eventsDuringReload
        this.eventsDuringReload = null
        for (const html of events) Turbo.renderStreamMessage(html)
      }
      document.addEventListener("turbo:frame-load", this.frameLoaded)
      // Before following: the shared connection may pass this page events (or say it is connected) at once.
      this.active = true
      this.following = sharedStreams ? sharedStreams.follow(this) : followAlone(this)
    }

    disconnectedCallback() {
      if (!this.active) return
      this.active = false
      document.removeEventListener("turbo:frame-load", this.frameLoaded)
      this.eventsDuringReload = null
      this.following.stop()
      this.following = null
      this.removeAttribute("connected")
    }

    // One event of this page's stream, from whichever connection carries it.
    receive(id, html) {
      if (!this.active) return
      // A reload of the live part (views escape ">", so only the server's own frame can end with this attribute) is
      // applied even at an id this page has had: a block changed what the page may show.
      const reload = html.includes(" data-live-reload></turbo-frame>")
      const newer = id && isAfter(id, this.received)
      if (id && !newer && !reload) return
      if (newer) this.received = id
      Turbo.renderStreamMessage(html)
      // Turbo applies a stream action on the next animation frame, and a visit that started just before may have
      // swapped the body by then: the action never reached this page. So the id is kept only after the action ran
      // (this frame callback is queued after Turbo's) and only while this element is still on the page; otherwise
      // the page keeps the older id and replays the event when restored (appends and prepends replace by id).
      if (newer) requestAnimationFrame(() => { if (this.isConnected) this.dataset.lastEventId = id })
      // The server reloads a live frame when the page missed events or a block changed (data-live-reload). The
      // fresh page may have been read before the events that arrive while the frame loads, and those found no
      // target in the empty frame: they are kept and applied again once it has loaded (each action leaves the page
      // the same when applied twice).
      if (reload) this.eventsDuringReload = []
      else if (this.eventsDuringReload) {
        this.eventsDuringReload.push(html)
        // A frame that never loads (its request failed) stops the keeping: the next reload brings the page back.
        if (this.eventsDuringReload.length > 1000) this.eventsDuringReload = null
      }
    }

    // Its events flow (the attribute is what turbo-rails' cable stream source sets too).
    connected(yes) { this.toggleAttribute("connected", yes && this.active) }

    // The session ended (signed out elsewhere, revoked, expired): the stream's last event names where to go.
    signedOut(path) {
      if (!this.active) return
      this.disconnectedCallback()
      // Nothing of this person stays for whoever comes next: the worker drops their kept pages and waiting writes.
      if (navigator.serviceWorker && navigator.serviceWorker.controller) navigator.serviceWorker.controller.postMessage({ type: "signed-out" })
      Turbo.visit(path || "/sign_in")
    }
  }

  // A page's own EventSource, where tabs cannot share one. It reconnects by itself, sending Last-Event-ID.
  function followAlone(element) {
    const url = new URL(element.url)
    if (element.received) url.searchParams.set("last_event_id", element.received)
    const source = new EventSource(url)
    source.addEventListener("open", () => element.connected(true))
    source.addEventListener("error", () => element.connected(false))
    source.addEventListener("message", (event) => element.receive(event.lastEventId, event.data))
    source.addEventListener("signed-out", (event) => element.signedOut(event.data))
    return { stop: () => source.close() }
  }

  // This tab's side of the shared connection, and, while this tab holds the lock, the connection itself.
  const sharedStreams = ("locks" in navigator && "BroadcastChannel" in window) && (() => {
    const tab = Math.random().toString(36).slice(2)
    const channel = new BroadcastChannel("foyer-live")
    const elements = new Set()
    let leader = null
    const tell = (message) => { if (leader) leader.hear(message); else channel.postMessage(message) }
    const deliver = (message) => {
      for (const element of [...elements]) {
        if (message.type === "event" && follows(message, element)) element.receive(message.id, message.html)
        if (message.type === "connected") element.connected(message.names.includes(element.name))
      }
      // One visit per tab, whatever it shows.
      if (message.type === "signed-out") [...elements][0]?.signedOut(message.path)
    }
    const announce = (element) => tell({ type: "follow", tab, name: element.name, after: element.received })

    channel.onmessage = ({ data: message }) => {
      if (message.type === "leader") for (const element of elements) announce(element)
      else if (leader && (message.type === "follow" || message.type === "unfollow" || message.type === "gone")) leader.hear(message)
      else deliver(message)
    }
    // A tab that goes away says so, so that the connection does not keep streams nobody shows.
    addEventListener("pagehide", () => tell({ type: "gone", tab }))
    addEventListener("pageshow", (event) => { if (event.persisted) for (const element of elements) announce(element) })

    // Held until the tab goes away; the next tab waiting gets it then.
    navigator.locks.request("foyer-live", () => new Promise(() => {
      leader = lead(channel, deliver)
      for (const element of elements) announce(element)
      channel.postMessage({ type: "leader" })
    }))

    return {
      follow(element) {
        elements.add(element)
        announce(element)
        return {
          stop() {
            elements.delete(element)
            if (![...elements].some((other) => other.name === element.name)) tell({ type: "unfollow", tab, name: element.name })
          },
        }
      },
    }
  })()

  // The tab holding the connection: which tabs follow which stream, where the connection is on each, and its
  // latest events (a tab that joins a little behind gets them from here, not from a new connection).
  function lead(channel, deliverHere) {
    const streams = new Map()  // name → { tabs: Set, position, from, recent: [{ id, html }] }
    let source = null
    let openNames = []
    let retryAfter = null
    let failures = 0
    let reconnecting = false
    let timer = null
    let pruning = null
    // Every tab, this one too.
    const broadcast = (message) => { channel.postMessage(message); deliverHere(message) }

    const connectSoon = (delay = 0) => {
      clearTimeout(timer)
      timer = setTimeout(connect, delay)
    }
    // No tab shows a live page any more (a second later: a visit from one to the next leaves and follows again).
    const pruneSoon = () => {
      clearTimeout(pruning)
      pruning = setTimeout(() => {
        if ([...streams.values()].some((stream) => stream.tabs.size > 0)) return
        source?.close()
        source = null
        streams.clear()
        openNames = []
      }, 1000)
    }

    function connect() {
      timer = null
      if (source) source.close()
      source = null
      for (const [name, stream] of streams) if (stream.tabs.size === 0) streams.delete(name)
      if (streams.size === 0) {
        openNames = []
        return
      }
      const url = new URL("/streams", document.baseURI)
      for (const [name, stream] of streams) {
        const from = stream.from ?? stream.position
        url.searchParams.append("follow", from ? `${name}:${from}` : name)
        stream.from = null
      }
      if (reconnecting) url.searchParams.set("reconnect", "1")
      reconnecting = false
      const names = [...streams.keys()]
      const opened = source = new EventSource(url)
      for (const name of names) {
        opened.addEventListener(name, (event) => {
          const stream = streams.get(name)
          if (!stream) return
          stream.position = event.lastEventId
          stream.recent.push({ id: event.lastEventId, html: event.data })
          if (stream.recent.length > 100) stream.recent.shift()
          broadcast({ type: "event", name, id: event.lastEventId, html: event.data })
        })
      }
      opened.addEventListener("open", () => {
        failures = 0
        retryAfter = null
        openNames = names
        broadcast({ type: "connected", names })
      })
      // A deploy ends the connection saying when to come back (each its own moment, not all at once).
      opened.addEventListener("retry", (event) => { retryAfter = Number(event.data) })
      opened.addEventListener("signed-out", (event) => {
        opened.close()
        source = null
        streams.clear()
        openNames = []
        broadcast({ type: "signed-out", path: event.data })
      })
      opened.addEventListener("error", () => {
        if (opened !== source) return
        // EventSource would reconnect to the same address: this one says where each stream is now.
        const refused = opened.readyState === EventSource.CLOSED
        opened.close()
        source = null
        openNames = []
        broadcast({ type: "connected", names: [] })
        // Refused (a 4xx: the sign-in is gone, or the names are from another server): not again until a page
        // follows a stream anew.
        if (refused) return
        failures += 1
        reconnecting = true
        connectSoon(retryAfter ?? Math.min(30000, 500 * 2 ** failures) * (0.5 + Math.random() / 2))
      })
    }

    return {
      hear(message) {
        const stream = streams.get(message.name)
        if (message.type === "gone" || message.type === "unfollow") {
          for (const [name, stream] of streams) if (message.type === "gone" || name === message.name) stream.tabs.delete(message.tab)
          pruneSoon()
          return
        }
        if (!stream) {
          streams.set(message.name, { tabs: new Set([message.tab]), position: message.after, from: null, recent: [] })
          connectSoon()
          return
        }
        stream.tabs.add(message.tab)
        if (openNames.includes(message.name)) broadcast({ type: "connected", names: openNames })
        // Behind the connection: the events it missed from the latest ones, or a connection from its position.
        if (!message.after || !isAfter(stream.position, message.after)) return
        const missed = stream.recent.findIndex((event) => isAfter(event.id, message.after))
        const previous = stream.recent[missed - 1]
        if (missed > 0 && !isAfter(previous.id, message.after) && !isAfter(message.after, previous.id)) {
          for (const event of stream.recent.slice(missed)) broadcast({ type: "event", name: message.name, ...event })
        } else if (!stream.from || isAfter(stream.from, message.after)) {
          stream.from = message.after
          connectSoon()
        }
      },
    }
  }

  // Last: defining it connects the elements already on the page, which needs everything above.
  customElements.define("turbo-stream-source", StreamSource)
}

// Pages say times in the reader's zone ("yesterday at 14:05"): the server reads it from this cookie, and says
// UTC until it has it.
;(() => {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone
  if (zone && !document.cookie.split("; ").includes("tz=" + encodeURIComponent(zone))) {
    document.cookie = "tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax"
  }
})()

// A part that says which version of its record it shows (data-version) is replaced only by a newer one: an edit
// form open at version 7 hears of a save at 8, not of a change that left the version as it was (a picture's sizes)
// nor of an older event replayed on reconnect.
document.addEventListener("turbo:before-stream-render", (event) => {
  const stream = event.target
  const incoming = stream.templateContent && stream.templateContent.firstElementChild
  if (!incoming || !incoming.dataset.version) return
  const targets = stream.targetElements || []
  const newer = (target) => !target.dataset.version || Number(incoming.dataset.version) > Number(target.dataset.version)
  if (targets.length > 0 && !targets.some(newer)) event.preventDefault()
})
