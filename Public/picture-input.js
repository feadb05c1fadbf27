// The post form's picture field: a preview of the picture chosen (the camera's, on a phone) before it is sent, and
// the 20 MB limit said at once rather than after uploading it. The server decides what it takes either way.
(() => {
  const limitMessage = (input, file) => {
    const limit = Number(input.dataset.maximumBytes || 0)
    if (!limit || file.size <= limit) return ""
    return foyerWords("picture_too_large", { size: (file.size / 1048576).toFixed(1), limit: Math.round(limit / 1048576) })
  }

  document.addEventListener("change", (event) => {
    const input = event.target
    if (!(input instanceof HTMLInputElement) || !input.matches("[data-picture-input]")) return
    const field = input.closest(".field")
    const preview = field?.querySelector("[data-picture-preview]")
    const error = field?.querySelector("#picture-client-error")
    const file = input.files && input.files[0]
    const message = file ? limitMessage(input, file) : ""
    input.setCustomValidity(message)
    if (error) {
      error.textContent = message
      error.hidden = !message
    }
    if (!preview) return
    const old = preview.querySelector("img")
    if (old) URL.revokeObjectURL(old.src)
    preview.replaceChildren()
    preview.hidden = !file || Boolean(message)
    if (!file || message) return
    const image = document.createElement("img")
    image.alt = foyerWords("picture_chosen")
    // HEIC shows only where the browser reads it (Safari); elsewhere the preview stays hidden.
    image.onerror = () => { preview.hidden = true }
    image.src = URL.createObjectURL(file)
    preview.append(image)
  })
})()
