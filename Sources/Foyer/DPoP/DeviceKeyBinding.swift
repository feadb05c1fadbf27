import Foundation
import Hummingbird

/// Which token a session found by it may be presented as. A bound session's own token only as
/// `Authorization: DPoP` with a fresh proof from its key; its WebView's cookie token only as the cookie; an unbound
/// session's token as it always was (never as DPoP: a proof cannot bind a token after the fact).
struct DeviceKeyBinding: Sendable {
    let verifier: DPoPVerifier
    let trustProxy: Bool

    /// False for a token presented in a way it is never good for (as if unknown); DPoPRefusal when the app should be
    /// told why (a bound token without its proof, a proof that does not check out, an unbound token as DPoP).
    func admits(_ found: SessionRepository.Found, token: String, credential: Identity.Credential, request: Request) async throws -> Bool {
        if found.isCookieToken { return credential == .cookie }
        guard let thumbprint = found.session.dpopThumbprint else {
            if credential == .dpop {
                throw DPoPRefusal.token("This session is not bound to a key: send its token as Authorization: Bearer")
            }
            return true
        }
        switch credential {
        case .cookie:
            // The app's own token is not a cookie a browser was given: worthless without the key, there too.
            return false
        case .bearer:
            throw DPoPRefusal.token("This session is bound to the app's key: send its token as Authorization: DPoP with a DPoP proof")
        case .dpop:
            guard let proof = try await proof(of: request, accessToken: token) else {
                throw DPoPRefusal.proof("This session is bound to the app's key: every request needs a DPoP proof")
            }
            guard proof.thumbprint == thumbprint else {
                throw DPoPRefusal.proof("The proof is signed with another key than the one this session is bound to")
            }
            return true
        }
    }

    /// The request's DPoP proof, checked and spent; nil when it carries none. `accessToken`: nil at sign-in.
    func proof(of request: Request, accessToken: String?) async throws -> DPoPProof? {
        // What `htu` must name: the request's URL as the app addressed it (through the load balancer when trusted).
        let url = request.publicOrigin(trustProxy: trustProxy) + request.uri.path
        return try await verifier.proof(in: request.headers, method: request.method, url: url, accessToken: accessToken)
    }
}
