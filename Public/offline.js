// The page's half of working offline (the worker is Public/foyer-worker.js, served at /service-worker.js): registers
// the worker, gives every change Turbo sends an Idempotency-Key (so one sent twice is stored once), and shows what
// the worker knows: "Offline — showing this page as it was at 14:05" on a kept copy, changes not sent yet where they
// belong, the kept pages on the offline page, and a change the server refused when it finally arrived (kept, with
// what was typed, until it is saved or discarded).
;(() => {
  if (!("serviceWorker" in navigator)) return
  navigator.serviceWorker.register("/service-worker.js", { scope: "/" }).catch(() => {})

  const newKey = () => (crypto.randomUUID ? crypto.randomUUID() : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join(""))

  document.addEventListener("turbo:before-fetch-request", (event) => {
    const options = event.detail.fetchOptions
    if ((options.method || "get").toLowerCase() !== "get") options.headers["Idempotency-Key"] = newKey()
  })

  // The worker kept a change for later (202, Foyer-Waiting-Show): go where it shows as waiting.
  document.addEventListener("turbo:before-fetch-response", (event) => {
    const show = event.detail.fetchResponse.response.headers.get("Foyer-Waiting-Show")
    if (!show) return
    event.preventDefault()
    Turbo.visit(show, { action: location.pathname === show ? "replace" : "advance" })
  })

  // Asks the worker (which holds the caches and the queue) and waits for its answer.
  function askWorker(type, details = {}) {
    const worker = navigator.serviceWorker.controller
    if (!worker) return Promise.resolve(null)
    return new Promise((resolve) => {
      const channel = new MessageChannel()
      channel.port1.onmessage = (event) => resolve(event.data)
      worker.postMessage({ type, ...details }, [channel.port2])
    })
  }

  const clock = (date) => {
    const locale = document.documentElement.lang || []
    const time = date.toLocaleTimeString(locale, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" })
    if (date.toDateString() === new Date().toDateString()) return time
    return date.toLocaleDateString(locale, { weekday: "short", day: "numeric", month: "short" }) + ", " + time
  }

  function showCopyNotice() {
    const keptAt = document.body.dataset.offlineCopy
    let notice = document.getElementById("offline-notice")
    if (!keptAt) return notice && notice.remove()
    if (!notice) {
      notice = Object.assign(document.createElement("p"), { id: "offline-notice", className: "offline-banner" })
      notice.setAttribute("role", "status")
      document.querySelector("main").prepend(notice)
    }
    notice.textContent = foyerWords("offline_copy", { time: clock(new Date(keptAt)) })
  }

  // The pages' own words for the statuses (scripts get them under their full keys).
  const statusLabels = { OPEN: "tasks.status.open", ASSIGNED: "tasks.status.assigned", COMPLETE: "tasks.status.complete" }
  const status = (value) => (statusLabels[value] ? foyerWords(statusLabels[value]) : value)
  const describe = (write) => (write.kind === "status" ? foyerWords("marked", { status: status(write.status) }) : `“${write.title}”`)

  // What the server said when a waiting write arrived: a newer version (409 from a form, 412 from If-Match), the
  // thing itself gone (410), or anything else it refused.
  const refusedLabels = { 409: "not_saved_changed", 412: "not_saved_changed", 410: "not_saved_deleted" }

  function badge(write) {
    const refused = write.state === "refused"
    const element = document.createElement(refused ? "a" : "span")
    element.className = refused ? "waiting-badge waiting-write refused-badge" : "waiting-badge waiting-write"
    element.textContent = foyerWords(refused ? refusedLabels[write.answer.status] || "refused" : "not_sent")
    if (refused) element.href = `/offline/refused/${write.key}`
    return element
  }

  // Each waiting change where it belongs: a new item at the end (or start) of its list, a change beside the item.
  function showWaiting(writes) {
    for (const old of document.querySelectorAll(".waiting-write")) old.remove()
    for (const write of writes) {
      const path = new URL(write.url).pathname
      if (write.kind === "create") {
        for (const list of document.querySelectorAll(`[data-waiting-list="${CSS.escape(path)}"]`)) {
          const item = Object.assign(document.createElement("li"), { className: "waiting-write" })
          item.dataset.waitingKey = write.key
          item.append(Object.assign(document.createElement("strong"), { textContent: write.title }), " ", badge(write))
          if (list.dataset.waitingAt === "start") list.prepend(item)
          else list.append(item)
        }
      } else {
        for (const element of document.querySelectorAll(`[data-waiting-item="${CSS.escape(path.replace(/\/status$/, ""))}"]`)) {
          const note = Object.assign(document.createElement("p"), { className: "waiting-write waiting-change" })
          note.dataset.waitingKey = write.key
          note.append(badge(write), " ", describe(write))
          element.append(note)
        }
      }
    }
  }

  // The offline page: what can be opened without a network, and what waits to be sent.
  function showOfflinePage(state) {
    const pages = document.getElementById("offline-pages")
    if (!pages) return
    pages.replaceChildren(...state.pages.map((page) => {
      const link = Object.assign(document.createElement("a"), { href: page.url, textContent: page.title || page.url })
      const item = document.createElement("li")
      item.append(link, " · " + foyerWords("kept_at", { time: clock(new Date(page.keptAt)) }))
      return item
    }))
    document.getElementById("offline-pages-empty").hidden = state.pages.length > 0
    const waiting = document.getElementById("offline-waiting")
    waiting.hidden = state.writes.length === 0
    document.getElementById("offline-waiting-list").replaceChildren(...state.writes.map((write) => {
      const item = document.createElement("li")
      item.dataset.waitingKey = write.key
      item.append(badge(write), " ", describe(write))
      return item
    }))
  }

  // The page of a refused write holds what was typed, in the server's form: it can be saved from there, or let go.
  function offerDiscard() {
    const key = /^\/offline\/refused\/([^/]+)$/.exec(location.pathname)
    const actions = document.querySelector("main form .form-actions")
    if (!key || !actions || actions.querySelector("[data-discard-write]")) return
    const button = Object.assign(document.createElement("button"), { type: "button", className: "secondary", textContent: foyerWords("discard") })
    button.dataset.discardWrite = key[1]
    button.addEventListener("click", async () => {
      const next = await askWorker("discard", { key: key[1] })
      Turbo.visit(next || "/", { action: "replace" })
    })
    actions.append(" ", button)
  }

  // Renders overlap (a page loads while the worker says its writes changed): only the latest one's state is shown,
  // so an answer read before a write was settled never puts it back on the page.
  let renders = 0
  async function render() {
    if (document.documentElement.hasAttribute("data-turbo-preview")) return
    const mine = ++renders
    offerDiscard()
    showCopyNotice()
    const state = await askWorker("offline-state")
    if (!state || mine !== renders) return
    showWaiting(state.writes)
    showOfflinePage(state)
    showRefused(state)
  }

  // A change refused when it arrived is shown as the page the server answered, once (afterwards it stays listed,
  // with its link, until it is saved or discarded). True when it goes there.
  let showingRefused = null
  function showRefused(state) {
    const refused = state.writes.find((write) => write.state === "refused" && !write.shownAt)
    if (!refused || document.visibilityState !== "visible") return false
    if (showingRefused !== refused.key) {
      showingRefused = refused.key
      Turbo.visit(`/offline/refused/${refused.key}`)
    }
    return true
  }

  document.addEventListener("turbo:load", () => {
    // A page rendered for a native shell says so to requests its worker makes with the WebView's own User-Agent.
    if (document.body.classList.contains("native") && !document.cookie.split("; ").includes("native_shell=1")) {
      document.cookie = "native_shell=1; path=/; samesite=lax"
    }
    render()
  })
  navigator.serviceWorker.addEventListener("message", (event) => {
    if (event.data && event.data.type === "writes-changed") render()
  })
  // The network is back: send what waits, then replace a kept copy with the page as it is now.
  window.addEventListener("online", async () => {
    await askWorker("send-waiting")
    const state = await askWorker("offline-state")
    if (state && showRefused(state)) return
    if (document.body.dataset.offlineCopy || document.getElementById("offline-page")) Turbo.visit(location.href, { action: "replace" })
  })
})()
