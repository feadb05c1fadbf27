// Foyer's service worker, served at /service-worker.js after one line the server writes (self.FOYER_OFFLINE): the
// offline rules of path_configuration.json, what to precache, and a version that changes with any of them.
//
// Pages: kept per person (the Foyer-Offline-Owner header each page carries), by the strategy the last matching rule
// names; a kept page opens offline marked as a copy (Public/offline.js shows the notice), a page never kept opens the
// offline page. Writes to a path whose rule says "offline_writes": "queue" that cannot reach the server wait in
// IndexedDB with their Idempotency-Key and are sent in the order made when the network is back. Signing out (or
// another person's page arriving) drops what the previous person left: pages, waiting writes, refused answers.
const settings = self.FOYER_OFFLINE || { enabled: false }
const staticCache = "foyer-static-" + settings.version
const pagesCachePrefix = "foyer-pages-"
// Posts' pictures: their URLs never name other bytes, so a kept one serves online and offline alike. Kept while a
// kept page shows them (and at most a few per kept page).
const picturesCache = "foyer-pictures"
const picturePath = /^\/pictures\/[A-Za-z0-9_-]{22}\/(page|thumbnail)$/
const neverKept = /^\/(graphql|streams(\/|$)|service-worker\.js)/

self.addEventListener("install", (event) => {
  self.skipWaiting()
  if (!settings.enabled) return
  // Fresh from the server, not the HTTP cache: the version names these bytes.
  event.waitUntil(caches.open(staticCache).then((cache) => cache.addAll(settings.precache.map((path) => new Request(path, { cache: "reload" })))))
})

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      const old = name.startsWith("foyer-static-") && name !== staticCache
      if (old || (!settings.enabled && name.startsWith("foyer-"))) await caches.delete(name)
    }
    if (!settings.enabled) {
      // Turned off (--offline=false): leave nothing behind.
      await new Promise((resolve) => { const request = indexedDB.deleteDatabase("foyer-offline"); request.onsuccess = request.onerror = resolve })
      await self.registration.unregister()
      return
    }
    await self.clients.claim()
  })())
})

// --- Rules ------------------------------------------------------------------------------------------------------

const rules = (settings.rules || []).map((rule) => ({ ...rule, expressions: rule.patterns.map((pattern) => new RegExp(pattern)) }))
const matches = (rule, path) => rule.expressions.some((expression) => expression.test(path))

function strategyFor(path) {
  let strategy = "none"
  for (const rule of rules) if (rule.offline && matches(rule, path)) strategy = rule.offline
  return strategy
}

const queuesWrites = (path) => rules.some((rule) => rule.writes === "queue" && matches(rule, path))

// --- Fetch -------------------------------------------------------------------------------------------------------

self.addEventListener("fetch", (event) => {
  if (!settings.enabled) return
  const request = event.request
  const url = new URL(request.url)
  if (url.origin !== self.location.origin) return
  const path = url.pathname + url.search
  if (neverKept.test(url.pathname) || (request.headers.get("Accept") || "").includes("text/event-stream")) return
  if (request.method === "GET") {
    if (url.pathname.startsWith("/offline/refused/")) return event.respondWith(refusedAnswer(url.pathname.split("/").pop()))
    if (picturePath.test(url.pathname)) return event.respondWith(picture(event, request))
    const strategy = strategyFor(path)
    const page = request.mode === "navigate" || (request.headers.get("Accept") || "").includes("text/html")
    if (strategy === "network-first") return event.respondWith(networkFirst(event, request, page))
    if (strategy === "cache-first") return event.respondWith(cacheFirst(request))
    if (strategy === "stale-while-revalidate") return event.respondWith(staleWhileRevalidate(event, request, page))
    // Not kept, but a page still opens Foyer's offline page rather than the browser's error.
    if (page) return event.respondWith(fetch(request).catch(() => offlinePage()))
    return
  }
  if (request.method === "POST" && queuesWrites(url.pathname)) event.respondWith(sendOrWait(event, request))
})

async function networkFirst(event, request, page) {
  try {
    const response = await fetch(request)
    event.waitUntil(keep(request, response.clone()).then(sendWaiting))
    return response
  } catch (offline) {
    return (await keptCopy(request)) || (page ? offlinePage() : Response.error())
  }
}

async function cacheFirst(request) {
  const cached = await caches.match(request, { cacheName: staticCache })
  if (cached) return cached
  const response = await fetch(request)
  if (response.status === 200) await (await caches.open(staticCache)).put(request, response.clone())
  return response
}

async function staleWhileRevalidate(event, request, page) {
  const fresh = fetch(request).then((response) => {
    event.waitUntil(keep(request, response.clone()).then(sendWaiting))
    return response
  })
  const copy = await keptCopy(request, { marked: false })
  if (copy) {
    event.waitUntil(fresh.catch(() => null))
    return copy
  }
  return fresh.catch(() => (page ? offlinePage() : Response.error()))
}

async function picture(event, request) {
  const cache = await caches.open(picturesCache)
  // The variant the browser chose online (its srcset, its Accept) is the one it asks for offline.
  const kept = await cache.match(request.url, { ignoreVary: true })
  if (kept) return kept
  const response = await fetch(request)
  if (response.status === 200) event.waitUntil(cache.put(request.url, response.clone()).then(trimPictures))
  return response
}

// The pictures no kept page shows go; so do the oldest beyond a few per kept page.
async function trimPictures() {
  const shown = new Set()
  let pages = 0
  for (const name of await caches.keys()) {
    if (!name.startsWith(pagesCachePrefix)) continue
    const cache = await caches.open(name)
    for (const key of await cache.keys()) {
      pages += 1
      const copy = await cache.match(key)
      for (const path of (copy?.headers.get("Foyer-Pictures") || "").split(" ")) if (path) shown.add(path)
    }
  }
  const cache = await caches.open(picturesCache)
  const keys = await cache.keys()
  const kept = []
  for (const key of keys) {
    if (shown.has(new URL(key.url).pathname)) kept.push(key)
    else await cache.delete(key)
  }
  for (const old of kept.slice(0, Math.max(0, kept.length - pages * 4))) await cache.delete(old)
}

async function offlinePage() {
  const page = await caches.match(settings.offlinePage, { cacheName: staticCache })
  return page || new Response("You are offline, and this page was never opened here.", { status: 503, headers: { "Content-Type": "text/plain" } })
}

// --- Kept pages, per person ----------------------------------------------------------------------------------------

// Keeps a 200 page under the person it belongs to, and when that is someone new drops what the last one left.
async function keep(request, response) {
  const owner = response.headers.get("Foyer-Offline-Owner")
  if (!owner) return
  await becomeOwner(owner)
  if (response.status !== 200 || response.redirected || response.type !== "basic") return
  // A frame's answer may be only the frame, not the page at its address (offline, a kept whole page serves a frame).
  if (request.headers.has("Turbo-Frame")) return
  if (!(response.headers.get("Content-Type") || "").startsWith("text/html")) return
  // The flash notice was for that moment ("Task saved"), not for every later reading of the copy.
  const html = (await response.text()).replace(/(<div id="flash"[^>]*>)[^<]*(<\/div>)/, "$1$2")
  const headers = new Headers(response.headers)
  headers.set("Foyer-Kept-At", new Date().toISOString())
  const title = /<title>([^<]*)<\/title>/.exec(html)
  if (title) headers.set("Foyer-Title", encodeURIComponent(unescapeHTML(title[1]).replace(/ · Foyer$/, "")))
  // The pictures this page shows stay as long as it does (trimPictures).
  headers.set("Foyer-Pictures", [...new Set(html.match(/\/pictures\/[A-Za-z0-9_-]{22}\/(page|thumbnail)/g) || [])].join(" "))
  const cache = await caches.open(pagesCachePrefix + owner)
  await cache.put(pageKey(request), new Response(html, { status: 200, headers }))
  // Oldest first: a page kept again moves to the end.
  const keys = await cache.keys()
  for (const old of keys.slice(0, Math.max(0, keys.length - settings.maxEntries))) await cache.delete(old)
  await trimPictures()
}

// A title as the page's HTML escapes it (views escape & < > " '), as text again.
const unescapeHTML = (html) =>
  html.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, name) => ({ amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'", "#x27": "'" })[name])

// Turbo asks for a page by fetch, a navigation by the browser: one copy serves both.
const pageKey = (request) => new Request(request.url, { method: "GET" })

// The kept copy for the current person (or a public page), marked with when it was kept so the page can say so.
async function keptCopy(request, { marked = true } = {}) {
  const owner = await currentOwner()
  for (const name of new Set([pagesCachePrefix + owner, pagesCachePrefix + "public"])) {
    const cache = await caches.open(name)
    const copy = await cache.match(pageKey(request))
    if (!copy) continue
    const keptAt = copy.headers.get("Foyer-Kept-At")
    if (!keptAt || Date.now() - Date.parse(keptAt) > settings.maxAge * 1000) {
      await cache.delete(pageKey(request))
      continue
    }
    if (!marked) return copy
    const html = (await copy.text()).replace("<body", `<body data-offline-copy="${keptAt}"`)
    return new Response(html, { status: 200, headers: copy.headers })
  }
  return null
}

async function becomeOwner(owner) {
  if (owner === (await currentOwner())) return
  await setState("owner", owner)
  // Someone else signed in: nothing of the last person stays. Signed out (a public page): their pages go, but writes
  // they made offline stay until they sign in again (and are sent) or someone else does (and they go).
  await forget(owner, { writes: owner !== "public" })
}

// Drops kept pages and (with `writes`) waiting writes that are not `keep`'s; public pages are everyone's and stay.
async function forget(keep, { writes }) {
  for (const name of await caches.keys()) {
    if (name.startsWith(pagesCachePrefix) && name !== pagesCachePrefix + keep && name !== pagesCachePrefix + "public") await caches.delete(name)
  }
  if (writes) for (const write of await allWrites()) if (write.owner !== keep) await deleteWrite(write.key)
  await tellPages({ type: "writes-changed" })
}

// --- Writes that wait ----------------------------------------------------------------------------------------------

// Sends a form; when the network is away, keeps it to send later and answers 202 with where to show it waiting.
async function sendOrWait(event, request) {
  const copy = request.clone()
  const fields = request.clone()
  try {
    const response = await fetch(request)
    // Saved from the page a refused write showed (the conflict page's form): what that write kept has done its work.
    if (response.ok) event.waitUntil(settleRefused(copy.url))
    return response
  } catch (offline) {
    const type = copy.headers.get("Content-Type") || ""
    // A post's form is multipart (it may carry a picture): its bytes wait as they are, the picture with them.
    const urlencoded = type.startsWith("application/x-www-form-urlencoded")
    if (!urlencoded && !type.startsWith("multipart/form-data")) throw offline
    const body = urlencoded ? await copy.text() : await copy.arrayBuffer()
    const form = urlencoded ? new URLSearchParams(body) : await fields.formData()
    const method = (form.get("_method") || "post").toLowerCase()
    if (method === "delete") throw offline
    const url = new URL(copy.url)
    const write = {
      key: copy.headers.get("Idempotency-Key") || crypto.randomUUID(),
      url: copy.url, body, type, owner: await currentOwner(), state: "waiting",
      // In the order made, even two in one millisecond.
      made: Math.max(Date.now(), ...(await allWrites()).map((earlier) => earlier.made + 1)),
      kind: url.pathname.endsWith("/status") ? "status" : method === "post" ? "create" : "edit",
      title: form.get("title") || "", status: form.get("status") || "",
    }
    // Shown waiting where it belongs: a new item in its list, a change on the item's page, a status on the list.
    write.show = write.kind === "edit" ? url.pathname : write.kind === "status" ? url.pathname.replace(/\/[^/]+\/status$/, "") : url.pathname
    await putWrite(write)
    await tellPages({ type: "writes-changed" })
    if (self.registration.sync) self.registration.sync.register("foyer-writes").catch(() => {})
    if (request.mode === "navigate") return Response.redirect(write.show, 303)
    return new Response(null, { status: 202, headers: { "Foyer-Waiting": write.key, "Foyer-Waiting-Show": write.show } })
  }
}

let sending = null
// One sender at a time, however many `online` events, syncs and pages ask: each write goes once, in order.
function sendWaiting() {
  sending = sending || sendInOrder().finally(() => { sending = null })
  return sending
}

async function sendInOrder() {
  const owner = await currentOwner()
  for (const write of await allWrites()) {
    // Only with the session of whoever made it.
    if (write.state !== "waiting" || write.owner !== owner) continue
    let response
    try {
      response = await fetch(write.url, {
        method: "POST", body: write.body, credentials: "same-origin", redirect: "manual",
        headers: { "Content-Type": write.type, "Idempotency-Key": write.key, Accept: "text/html, application/xhtml+xml" },
      })
    } catch (stillOffline) {
      break
    }
    // A key still in use (its first request is running) or a server not ready: try again later, keeping the order.
    if (response.status >= 500 || response.status === 408 || response.status === 429 || (response.status === 409 && response.headers.has("Retry-After"))) break
    if (response.type === "opaqueredirect" || response.ok) {
      await deleteWrite(write.key)
      continue
    }
    // Refused (a stale version, a form with errors, a session that ended): the person sees the page they would have
    // seen online, at /offline/refused/<key>, never a write dropped silently. It stays listed, with what was typed
    // in that page's form, until they save from it or discard it.
    await putWrite({ ...write, state: "refused", answer: { status: response.status, html: await response.text() } })
  }
  await tellPages({ type: "writes-changed" })
}

// Where saving what a refused write kept goes: its own address, or its list's when what it changed was deleted (the
// page then offers to publish it anew).
const savesTo = (write) => {
  const path = new URL(write.url).pathname
  return write.answer && write.answer.status === 410 ? path.replace(/\/[^/]+$/, "") : path
}

// A save to where a refused write's page saves: that write is settled.
async function settleRefused(url) {
  const owner = await currentOwner()
  const path = new URL(url).pathname
  const settled = (await allWrites()).filter((write) => write.state === "refused" && write.owner === owner && savesTo(write) === path)
  for (const write of settled) await deleteWrite(write.key)
  if (settled.length > 0) await tellPages({ type: "writes-changed" })
}

async function refusedAnswer(key) {
  const write = (await allWrites()).find((write) => write.key === key && write.state === "refused")
  if (!write) return fetch(`/offline/refused/${key}`)
  if (!write.shownAt) {
    await putWrite({ ...write, shownAt: Date.now() })
    await tellPages({ type: "writes-changed" })
  }
  const headers = { "Content-Type": "text/html; charset=utf-8", "Foyer-Refused-Status": String(write.answer.status) }
  return new Response(write.answer.html, { status: 200, headers })
}

self.addEventListener("sync", (event) => {
  if (event.tag === "foyer-writes") event.waitUntil(sendWaiting())
})

self.addEventListener("message", (event) => {
  const message = event.data || {}
  const reply = (value) => event.ports[0] && event.ports[0].postMessage(value)
  if (message.type === "send-waiting") event.waitUntil(sendWaiting().then(() => reply(true), () => reply(false)))
  if (message.type === "offline-state") event.waitUntil(offlineState().then(reply))
  // "Discard my changes" on a refused write's page.
  if (message.type === "discard") event.waitUntil(discard(message.key).then(reply, () => reply(null)))
  // The session ended (the stream's signed-out event): nothing of this person stays for whoever comes next.
  if (message.type === "signed-out") event.waitUntil(setState("owner", "public").then(() => forget("public", { writes: true })))
})

// What a page shows: the kept pages it may open, and the current person's writes, waiting or refused.
async function offlineState() {
  const owner = await currentOwner()
  const pages = []
  for (const name of new Set([pagesCachePrefix + owner, pagesCachePrefix + "public"])) {
    if (!(await caches.has(name))) continue
    const cache = await caches.open(name)
    for (const request of await cache.keys()) {
      const copy = await cache.match(request)
      const url = new URL(request.url)
      const title = decodeURIComponent(copy.headers.get("Foyer-Title") || "")
      pages.push({ url: url.pathname + url.search, title, keptAt: copy.headers.get("Foyer-Kept-At") })
    }
  }
  const writes = (await allWrites()).filter((write) => write.owner === owner)
  return { owner, pages, writes }
}

// The refused write's page, once discarded: where the person goes next (what the write was for).
async function discard(key) {
  const owner = await currentOwner()
  const write = (await allWrites()).find((write) => write.key === key && write.owner === owner && write.state === "refused")
  if (!write) return null
  await deleteWrite(key)
  await tellPages({ type: "writes-changed" })
  return write.answer.status === 410 ? savesTo(write) : write.show
}

async function tellPages(message) {
  for (const client of await self.clients.matchAll({ type: "window" })) client.postMessage(message)
}

// --- IndexedDB: "writes" by key, in the order made; "state" holds whose pages are kept -----------------------------

// Opened once for the worker's life (every page fetched reads whose it is), and again only if the browser closes it
// (Clear-Site-Data, storage pressure) or another version asks it to.
let opened = null
function database() {
  opened = opened || new Promise((resolve, reject) => {
    const request = indexedDB.open("foyer-offline", 1)
    request.onupgradeneeded = () => {
      request.result.createObjectStore("writes", { keyPath: "key" }).createIndex("made", "made")
      request.result.createObjectStore("state")
    }
    request.onsuccess = () => {
      const db = request.result
      db.onclose = () => { opened = null }
      db.onversionchange = () => { db.close(); opened = null }
      resolve(db)
    }
    request.onerror = () => { opened = null; reject(request.error) }
  })
  return opened
}

async function transaction(store, mode, work) {
  const db = await database()
  return new Promise((resolve, reject) => {
    const tx = db.transaction(store, mode)
    const request = work(tx.objectStore(store))
    tx.oncomplete = () => resolve(request && request.result)
    tx.onerror = tx.onabort = () => reject(tx.error)
  })
}

const allWrites = () => transaction("writes", "readonly", (store) => store.index("made").getAll())
const putWrite = (write) => transaction("writes", "readwrite", (store) => store.put(write))
const deleteWrite = (key) => transaction("writes", "readwrite", (store) => store.delete(key))
const currentOwner = async () => (await transaction("state", "readonly", (store) => store.get("owner"))) || "public"
const setState = (name, value) => transaction("state", "readwrite", (store) => store.put(value, name))
