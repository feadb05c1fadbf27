import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// `/terms` and `/contact`, public; accepting the terms, from the page's button or `POST /api/v1/me/terms`.
struct TermsController {
    let terms: Terms
    let storage: any TermsStorage
    let views: Views
    let signIn: SignIn

    func addRoutes(to router: FoyerRouter) {
        router.get(RouterPath(Terms.path), use: show)
        router.get("/contact", use: contact)
        let signedIn = router.group(context: SignedInContext.self)
        signedIn.post("/terms/accept", use: acceptFromForm)
        signedIn.post("/api/v1/me/terms", use: acceptFromAPI)
    }

    /// `terms/show`: the text, and for a signed-in reader who has not accepted this version, the button that does.
    struct TermsView: Sendable {
        let html: String
        let version: String
        let effective: String?
        let contactEmail: String
        /// Signed in and not accepted yet: the page offers the button.
        let needsAcceptance: Bool
        /// Signed in and accepted: when.
        let acceptedOn: String?
        /// Where the button takes the person afterwards (the page that sent them here).
        let returnTo: String?
        /// The page answers a refused write: it says why it is shown.
        let refusedWrite: Bool
        let csrfToken: String?

        init(_ terms: Terms, identity: Identity?, returnTo: String? = nil, refusedWrite: Bool = false) {
            let user = identity?.user
            csrfToken = identity?.session?.csrfToken
            (html, version, contactEmail) = (terms.html, terms.version, terms.contactEmail)
            effective = terms.effectiveAt.timeIntervalSince1970 > 0 ? Views.timestamp(terms.effectiveAt) : nil
            let accepted = user.map(terms.isAccepted(by:)) ?? false
            needsAcceptance = user != nil && !accepted
            acceptedOn = accepted ? user?.termsAcceptedAt.map(Views.timestamp) : nil
            (self.returnTo, self.refusedWrite) = (returnTo, refusedWrite)
        }
    }

    /// What native code reads to show the terms itself.
    struct TermsJSON: Encodable {
        let version: String
        let effectiveAt: Date
        let html: String
        let url: String
        let contactEmail: String
        /// Null signed out; else whether the caller accepted this version.
        let accepted: Bool?
        let acceptedAt: Date?
    }

    @Sendable func show(request: Request, context: FoyerRequestContext) async throws -> Response {
        let user = context.identity?.user
        if request.wantsJSON {
            return .json(TermsJSON(
                version: terms.version, effectiveAt: terms.effectiveAt, html: terms.html, url: Terms.path, contactEmail: terms.contactEmail,
                accepted: user.map(terms.isAccepted(by:)), acceptedAt: user?.termsAcceptedAt
            ))
        }
        let returnTo = request.uri.queryParameters["return_to"].map(String.init)
        return views.page("terms/show", ["title": Phrase("account.terms"), "terms": TermsView(terms, identity: context.identity, returnTo: returnTo)], request: request, context: context)
    }

    @Sendable func contact(request: Request, context: FoyerRequestContext) async throws -> Response {
        if request.wantsJSON { return .json(["contact_email": terms.contactEmail, "terms_url": Terms.path]) }
        return views.page("terms/contact", ["title": Phrase("layout.footer.contact"), "contact_email": terms.contactEmail], request: request, context: context)
    }

    @Sendable func acceptFromForm(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let fields = try await request.formFields(limit: 4096)
        try await accept(context.identity.userId)
        let returnTo = ReturnPath.safe(fields["return_to"], request: request)
        return .afterSubmit(request, redirectTo: returnTo == "/" ? "/posts" : returnTo, native: .refresh).flashing(.termsAccepted)
    }

    /// `{"version": "…"}` optional: when given it must be the version in force, so an app cannot accept terms it
    /// did not show.
    @Sendable func acceptFromAPI(request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        struct Acceptance: Decodable {
            let version: String?

            init(version: String?) { self.version = version }

            /// Absent is fine; present, it must be a string (`null` is not a version).
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                version = container.contains(.version) ? try container.decode(String.self, forKey: .version) : nil
            }

            enum CodingKeys: String, CodingKey { case version }
        }
        let buffer = try await request.body.collect(upTo: 4096)
        let acceptance = buffer.readableBytes == 0 ? Acceptance(version: nil) : try JSONDecoder().decode(Acceptance.self, from: buffer)
        if let version = acceptance.version, version != terms.version {
            throw ValidationFailed(errors: ["version": [Phrase("terms.errors.not_in_force", ["version": terms.version])]])
        }
        let now = try await accept(context.identity.userId)
        return .json(TermsJSON(
            version: terms.version, effectiveAt: terms.effectiveAt, html: terms.html, url: Terms.path, contactEmail: terms.contactEmail,
            accepted: true, acceptedAt: now
        ))
    }

    @discardableResult
    private func accept(_ userId: Int64) async throws -> Date {
        let now = Date()
        try await storage.accept(userId: userId, at: now)
        signIn.sessions.forgetCachedSignIns(of: userId)
        return now
    }
}

/// Read by name without `Mirror` (see PostViews.swift).
extension TermsController.TermsView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "html": html
        case "version": version
        case "effective": effective
        case "contactEmail": contactEmail
        case "needsAcceptance": needsAcceptance
        case "acceptedOn": acceptedOn
        case "returnTo": returnTo
        case "refusedWrite": refusedWrite
        case "csrfToken": csrfToken
        default: nil
        }
    }
}
