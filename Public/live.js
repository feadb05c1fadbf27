// <turbo-stream-source src="…">: follows a server-sent-event stream of <turbo-stream> elements while the element
// is on the page, as Turbo 7.2+ does. Turbo 7.1 has Turbo.connectStreamSource but not the element; a newer Turbo
// defines its own, and this one stands aside.
if (!customElements.get("turbo-stream-source")) {
  customElements.define("turbo-stream-source", class extends HTMLElement {
    connectedCallback() {
      // A preview from Turbo's cache is replaced by the real page at once: no need to connect for it.
      if (document.documentElement.hasAttribute("data-turbo-preview")) return
      this.source = new EventSource(this.getAttribute("src"))
      Turbo.connectStreamSource(this.source)
    }

    disconnectedCallback() {
      if (!this.source) return
      Turbo.disconnectStreamSource(this.source)
      this.source.close()
      this.source = null
    }
  })
}
