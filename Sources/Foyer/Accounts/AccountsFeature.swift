/// Accounts people own: signing up, confirming an address, a forgotten password, changing and deleting an
/// account, and taking its data away. Every mail these send goes through the outbox (`MailFeature`).
struct AccountsFeature {
    let mail: MailFeature
    let throttle: SignInThrottle

    init(_ app: Foundations, sessions: SessionsFeature) {
        mail = MailFeature(app)
        throttle = sessions.throttle
    }

    func addRoutes(to router: FoyerRouter, signIn: SignIn, views: Views) {
        SignUpController(signIn: signIn, views: views, mail: mail.accountMail, outbox: mail.sender, throttle: throttle).addRoutes(to: router)
    }
}
