import Foundation

/// A native app's ID token is traded for one session, at once: an older one, or one used before (on any instance),
/// is refused, and so is its nonce (OpenID Connect Core §15.5.2). Anyone who saw a token in a log or a proxy while
/// it was valid cannot mint sessions with it.
struct SingleUseIDTokens: Sendable {
    let spent: SpentCredentials
    /// `--oidc-id-token-max-age`: an app exchanges the token the moment its provider hands it over.
    let maximumAge: TimeInterval

    /// TokenRejected when the token is too old, or it or its nonce was spent; otherwise both are spent now, until the
    /// token expires (after that the verifier refuses it anyway).
    func spend(_ token: VerifiedToken, now: Date = Date()) async throws {
        let claims = token.claims
        guard let seconds = (claims["iat"] as? NSNumber)?.doubleValue else {
            throw TokenRejected("The ID token has no iat: Foyer cannot tell when it was issued")
        }
        let age = now.timeIntervalSince1970 - seconds
        guard age <= maximumAge else {
            throw TokenRejected("The ID token was issued \(Int(age)) s ago; Foyer takes ID tokens at most \(Int(maximumAge)) s old: exchange it the moment the provider hands it over")
        }
        // Kept a little past expiry: the verifier's leeway still accepts it then.
        let keptUntil = max(token.expiresAt, now).addingTimeInterval(TokenVerifier.leeway + 1)
        let identifier = (claims["jti"] as? String).flatMap { $0.isEmpty ? nil : $0 } ?? token.raw.sha256Hex
        guard try await spent.spend(.idToken, scope: token.provider, identifier: identifier, expiresAt: keptUntil, now: now) else {
            throw TokenRejected("This ID token was already used to sign in: get a new one from the provider for every sign-in")
        }
        if let nonce = claims["nonce"] as? String, !nonce.isEmpty {
            guard try await spent.spend(.nonce, scope: token.provider, identifier: nonce, expiresAt: keptUntil, now: now) else {
                throw TokenRejected("The ID token's nonce was already used to sign in: make a new nonce for every sign-in")
            }
        }
    }
}
