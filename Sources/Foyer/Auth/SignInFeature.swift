/// Signing in and out: the sessions API native apps use, and the web sign-in form.
struct SignInFeature {
    let signIn: SignIn
    let authenticator: Authenticator

    init(_ app: Foundations, sessions: SessionsFeature, providers: IdentityProviders, passkeys: Passkeys) {
        let binding = DeviceKeyBinding(verifier: DPoPVerifier(spent: sessions.spent), trustProxy: app.config.trustProxy)
        signIn = SignIn(
            users: sessions.users, sessions: sessions.sessions, providers: providers, throttle: sessions.throttle,
            secureCookies: app.config.secureCookies, trustProxy: app.config.trustProxy, sessionLifetime: app.config.sessionLifetime,
            metrics: app.metrics, idTokens: SingleUseIDTokens(spent: sessions.spent, maximumAge: app.config.oidcIDTokenMaximumAge),
            binding: binding, passkeys: passkeys
        )
        authenticator = Authenticator(sessions: sessions.sessions, providers: providers, binding: binding)
    }

    func addRoutes(to router: FoyerRouter, views: Views) {
        SessionsAPIController(signIn: signIn).addRoutes(to: router)
        WebSessionController(signIn: signIn, views: views).addRoutes(to: router)
    }
}
