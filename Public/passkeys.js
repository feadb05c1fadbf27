// Passkeys in the browser (WebAuthn Level 3's JSON forms): adding one on /account, and signing in with one on
// /sign_in, by the browser's autofill (conditional mediation) where it offers it, or by the button. The server makes
// every option and checks every answer (Sources/Foyer/Passkeys); this only carries them.
;(() => {
  const supported = () =>
    window.PublicKeyCredential && PublicKeyCredential.parseCreationOptionsFromJSON && PublicKeyCredential.parseRequestOptionsFromJSON

  const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || ""

  async function postJSON(path, body) {
    const response = await fetch(path, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrfToken() },
      body: body === undefined ? "{}" : JSON.stringify(body),
    })
    const answer = await response.json().catch(() => ({}))
    if (!response.ok) throw new Error(answer.error || answer.error_description || foyerWords("server_answered", { status: response.status }))
    return answer
  }

  const show = (element, text) => { if (element) { element.textContent = text; element.hidden = !text } }

  // A ceremony the person cancelled, or that timed out, says so plainly; anything else says what the browser said.
  const reason = (error) => (error && error.name === "NotAllowedError" ? foyerWords("passkey_cancelled") : error.message || String(error))

  // --- /account: add one ----------------------------------------------------------------------------------------

  function armAdding() {
    const area = document.querySelector("[data-add-passkey]")
    if (!area) return
    if (!supported()) {
      const note = document.querySelector("[data-passkeys-unsupported]")
      if (note) note.hidden = false
      return
    }
    area.hidden = false
    const button = area.querySelector("#add-passkey")
    if (button.dataset.armed) return
    button.dataset.armed = "1"
    button.addEventListener("click", async () => {
      const error = document.getElementById("passkey-error")
      show(error, "")
      button.disabled = true
      try {
        const options = await postJSON("/api/v1/passkeys/registration_options")
        const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) })
        const name = document.getElementById("new-passkey-name").value.trim()
        await postJSON("/api/v1/passkeys", { ...credential.toJSON(), ...(name ? { name } : {}) })
        Turbo.visit("/account#passkeys", { action: "replace" })
      } catch (failure) {
        show(error, reason(failure))
      } finally {
        button.disabled = false
      }
    })
  }

  // --- /sign_in: sign in with one -------------------------------------------------------------------------------

  let pending = null // the conditional request waiting on the autofill, aborted for the button's

  async function signInWith(form, mediation) {
    pending?.abort()
    const controller = new AbortController()
    pending = controller
    const options = await postJSON("/api/v1/passkeys/authentication_options")
    const request = { publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options), signal: controller.signal }
    if (mediation) request.mediation = mediation
    const credential = await navigator.credentials.get(request)
    if (!credential || controller.signal.aborted) return
    form.querySelector('input[name="passkey"]').value = JSON.stringify(credential.toJSON())
    form.requestSubmit()
  }

  function armSignIn() {
    const form = document.getElementById("passkey-form")
    if (!form || !supported() || form.dataset.armed) return
    form.dataset.armed = "1"
    form.hidden = false
    const error = document.getElementById("passkey-sign-in-error")
    document.getElementById("passkey-sign-in").addEventListener("click", () => {
      show(error, "")
      signInWith(form).catch((failure) => show(error, reason(failure)))
    })
    // The browser's autofill offers the site's passkeys in the email field (autocomplete="username webauthn").
    if (PublicKeyCredential.isConditionalMediationAvailable) {
      PublicKeyCredential.isConditionalMediationAvailable().then((available) => {
        if (available) signInWith(form, "conditional").catch(() => {})
      })
    }
  }

  document.addEventListener("turbo:load", () => {
    armAdding()
    armSignIn()
    // /sign_up: where passkeys work, an account may be made without a password.
    const signUp = document.querySelector("[data-passkey-sign-up]")
    if (signUp && supported()) signUp.hidden = false
  })
  // Leaving the page ends a conditional request still waiting.
  document.addEventListener("turbo:before-visit", () => pending?.abort())
})()
