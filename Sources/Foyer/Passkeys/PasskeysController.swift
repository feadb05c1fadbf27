import Foundation
import HTTPTypes
import Hummingbird

/// The passkey routes: options for each ceremony, registering, and the account's list (JSON, and the account page's
/// forms). Signing in with one goes through `POST /api/v1/sessions` and `POST /sign_in` (`PasskeySignIn`).
struct PasskeysController {
    let passkeys: Passkeys
    /// Mails the account that a passkey was added: a way in it should know of.
    let notify: @Sendable (User, Passkey) async throws -> Void

    func addRoutes(to router: FoyerRouter) {
        router.post("/api/v1/passkeys/authentication_options", use: authenticationOptions)
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.post("/api/v1/passkeys/registration_options", use: registrationOptions)
        signedIn.post("/api/v1/passkeys", use: register)
        signedIn.get("/api/v1/passkeys", use: list)
        signedIn.patch("/api/v1/passkeys/{id}", use: rename)
        signedIn.delete("/api/v1/passkeys/{id}", use: delete)
        // The account page's forms.
        signedIn.post("/account/passkeys/{id}", use: changeFromForm)
    }

    @Sendable func authenticationOptions(request: Request, context: FoyerRequestContext) async throws -> Response {
        noStore(.json(try await passkeys.authenticationOptions(request: request)))
    }

    @Sendable func registrationOptions(request: Request, context: SignedInContext) async throws -> Response {
        try Passkeys.requireRecentSignIn(context.identity)
        return noStore(.json(try await passkeys.registrationOptions(for: context.identity.user, request: request)))
    }

    /// The body is the credential as `toJSON()` gives it, with an optional `name` beside its members.
    @Sendable func register(request: Request, context: SignedInContext) async throws -> Response {
        try Passkeys.requireRecentSignIn(context.identity)
        var request = request
        let buffer = try await request.collectBody(limitedTo: SessionsAPIController.maximumBodySize)
        let credential: RegistrationResponseJSON
        let named: Named
        do {
            credential = try JSONDecoder().decode(RegistrationResponseJSON.self, from: Data(buffer: buffer))
            named = try JSONDecoder().decode(Named.self, from: Data(buffer: buffer))
        } catch {
            throw AppError(.badRequest, message: "Send the new credential as the browser's PublicKeyCredential.toJSON() gives it (id, rawId, type, response), with an optional name")
        }
        let passkey: Passkey
        do {
            passkey = try await passkeys.register(credential, name: named.name, for: context.identity.user, request: request)
        } catch let refusal as WebAuthnRefusal {
            throw AppError(.unprocessableContent, title: Phrase("passkeys.errors.refused.title"), message: Phrase("passkeys.errors.refused", ["why": refusal.description]))
        }
        try await notify(context.identity.user, passkey)
        return .json(PasskeyJSON(passkey), status: .created)
    }

    private struct Named: Decodable {
        let name: String?
    }

    @Sendable func list(request: Request, context: SignedInContext) async throws -> Response {
        .json(try await passkeys.list(of: context.identity.user).map(PasskeyJSON.init))
    }

    struct RenameBody: FormOrJSONBody {
        let name: String?
        init(fields: [String: String]) { name = fields["name"] }
        static let expectedJSON = #"{"name": "…"}"#
    }

    @Sendable func rename(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let name = try await request.decodeBody(as: RenameBody.self).name
        let id = try context.parameters.require("id")
        try await rename(id, to: name, context: context)
        guard let renamed = try await passkeys.list(of: context.identity.user).first(where: { $0.id == id }) else { throw Self.notFound }
        return .json(PasskeyJSON(renamed))
    }

    @Sendable func delete(request: Request, context: SignedInContext) async throws -> Response {
        guard try await passkeys.delete(try context.parameters.require("id"), of: context.identity.user) else { throw Self.notFound }
        return Response(status: .noContent)
    }

    /// `_method=patch` with `name`, or `_method=delete`, from the account page; back to it either way.
    @Sendable func changeFromForm(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let fields = try await request.formFields()
        let id = try context.parameters.require("id")
        switch fields["_method"]?.lowercased() {
        case "delete":
            guard try await passkeys.delete(id, of: context.identity.user) else { throw Self.notFound }
            return Response.seeOther("/account#passkeys").flashing(.passkeyRemoved)
        case "patch":
            try await rename(id, to: fields["name"], context: context)
            return Response.seeOther("/account#passkeys").flashing(.passkeyRenamed)
        default:
            throw AppError(.unprocessableContent, message: "Send _method=patch with a name, or _method=delete")
        }
    }

    private func rename(_ id: String, to name: String?, context: SignedInContext) async throws {
        let name = name?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        guard !name.isEmpty, name.count <= Passkeys.maximumNameLength else {
            throw ValidationFailed(errors: ["name": [name.isEmpty ? Phrase("errors.blank") : Phrase("errors.too_long", count: Passkeys.maximumNameLength)]])
        }
        guard try await passkeys.rename(id, of: context.identity.user, to: name) else { throw Self.notFound }
    }

    private func noStore(_ response: Response) -> Response {
        var response = response
        response.headers[.cacheControl] = "no-store"
        return response
    }

    static let notFound = AppError(.notFound, title: Phrase("passkeys.errors.not_found.title"), message: Phrase("passkeys.errors.not_found"))
}
