/// Accounts people own: signing up, confirming an address, a forgotten password, changing and deleting an
/// account, and taking its data away. Every mail these send goes through the outbox (`MailFeature`).
struct AccountsFeature {
    let mail: MailFeature
    let storage: any AccountStorage
    let throttle: SignInThrottle
    let devices: PushDeviceRepository?

    init(_ app: Foundations, sessions: SessionsFeature, push: PushFeature) {
        // The word list ships beside the binary (its resource bundle): a binary copied without it stops here, at start,
        // rather than at the first sign-up.
        precondition(CommonPasswords.file != nil, "Foyer's resource bundle (foyer_Foyer.resources) must be beside the binary")
        mail = MailFeature(app)
        storage = app.store.accountStorage
        throttle = sessions.throttle
        devices = push.relay?.devices
    }

    func addRoutes(to router: FoyerRouter, signIn: SignIn, views: Views, posts: PostRepository) {
        let flows = AccountFlows(
            storage: storage, signIn: signIn, mail: mail.accountMail, outbox: mail.sender, throttle: throttle, devices: devices
        )
        SignUpController(accounts: flows, views: views).addRoutes(to: router)
        MailedLinksController(accounts: flows, views: views).addRoutes(to: router)
        let accountPage = AccountController(signIn: signIn, views: views, storage: storage)
        accountPage.addRoutes(to: router)
        AccountSettingsController(accounts: flows, accountPage: accountPage, posts: posts).addRoutes(to: router)
    }
}
