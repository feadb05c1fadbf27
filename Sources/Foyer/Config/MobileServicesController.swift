import Hummingbird

/// `GET /mobile-services.json`: the configuration an AeroGear app loads, pointed at Foyer and without secrets.
/// Served whether or not a file was given: Foyer's own GraphQL endpoint, and Keycloak when it is configured.
struct MobileServicesController {
    let services: MobileServices
    let keycloak: KeycloakSettings?

    func addRoutes(to router: FoyerRouter) {
        router.get("/mobile-services.json") { request, _ in
            let body = try services.clientFacing(baseURL: request.baseURL, keycloak: keycloak)
            return Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-cache"],
                body: .init(byteBuffer: ByteBuffer(bytes: body))
            )
        }
    }
}
