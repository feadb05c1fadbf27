// <turbo-stream-source src="…">: follows a server-sent-event stream of <turbo-stream> elements while the element
// is on the page, as Turbo 7.2+ does. Turbo 7.1 has Turbo.connectStreamSource but not the element; a newer Turbo
// defines its own, and this one stands aside.
//
// The id of the last event applied is kept on the element, so a page Turbo restores from its snapshot cache
// (Back) resumes from there (?last_event_id=) instead of missing what changed while it was away.
if (!customElements.get("turbo-stream-source")) {
  customElements.define("turbo-stream-source", class extends HTMLElement {
    connectedCallback() {
      // A preview from Turbo's cache is replaced by the real page at once: no need to connect for it.
      if (document.documentElement.hasAttribute("data-turbo-preview")) return
      const url = new URL(this.getAttribute("src"), document.baseURI)
      if (this.dataset.lastEventId) url.searchParams.set("last_event_id", this.dataset.lastEventId)
      this.source = new EventSource(url)
      Turbo.connectStreamSource(this.source)
      // Turbo applies a stream action on the next animation frame, and a visit that started just before may have
      // swapped the body by then: the action never reached this page. So the id is kept only after the action ran
      // (this frame callback is queued after Turbo's) and only while this element is still on the page; otherwise
      // the page keeps the older id and replays the event when restored (appends and prepends replace by id).
      this.source.addEventListener("message", (event) => {
        const id = event.lastEventId
        if (id) requestAnimationFrame(() => { if (this.isConnected) this.dataset.lastEventId = id })
      })
      // The server reloads a live frame when the page missed events (data-live-reload). The fresh page may have
      // been read before the events that arrive while the frame loads, and those found no target in the empty
      // frame: they are kept and applied again once it has loaded (each action leaves the page the same when
      // applied twice). Views escape ">", so only the server's own frame can end with this attribute.
      this.source.addEventListener("message", (event) => {
        if (event.data.includes(" data-live-reload></turbo-frame>")) this.eventsDuringReload = []
        else if (this.eventsDuringReload) {
          this.eventsDuringReload.push(event.data)
          // A frame that never loads (its request failed) stops the keeping: the next reload brings the page back.
          if (this.eventsDuringReload.length > 1000) this.eventsDuringReload = null
        }
      })
      this.frameLoaded = (event) => {
        const frame = event.target
        if (!this.eventsDuringReload || !frame.isConnected || !frame.hasAttribute("data-live-reload")) return
        const events = this.eventsDuringReload
        this.eventsDuringReload = null
        for (const html of events) Turbo.renderStreamMessage(html)
      }
      document.addEventListener("turbo:frame-load", this.frameLoaded)
      // The session ended (signed out elsewhere, revoked, expired): the stream's last event names where to go.
      this.source.addEventListener("signed-out", (event) => {
        this.disconnectedCallback()
        // Nothing of this person stays for whoever comes next: the worker drops their kept pages and waiting writes.
        if (navigator.serviceWorker && navigator.serviceWorker.controller) navigator.serviceWorker.controller.postMessage({ type: "signed-out" })
        Turbo.visit(event.data || "/sign_in")
      })
    }

    disconnectedCallback() {
      if (!this.source) return
      document.removeEventListener("turbo:frame-load", this.frameLoaded)
      this.eventsDuringReload = null
      Turbo.disconnectStreamSource(this.source)
      this.source.close()
      this.source = null
    }
  })
}

// Pages say times in the reader's zone ("yesterday at 14:05"): the server reads it from this cookie, and says
// UTC until it has it.
;(() => {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone
  if (zone && !document.cookie.split("; ").includes("tz=" + encodeURIComponent(zone))) {
    document.cookie = "tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax"
  }
})()
