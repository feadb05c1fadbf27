import HTTPTypes
import Hummingbird

/// `/`: where every sign-in and sign-out lands.
struct HomeController {
    let views: Views

    func addRoutes(to router: FoyerRouter) {
        router.get("/") { request, context in
            views.page("home/show", ["title": Phrase("home.title")], request: request, context: context)
        }
    }
}
