import Hummingbird

/// `GET /mobile-services.json`: the configuration an AeroGear app loads, pointed at Foyer and without secrets.
struct MobileServicesController {
    let services: MobileServices

    func addRoutes(to router: Router<FoyerRequestContext>) {
        router.get("/mobile-services.json") { request, _ in
            let body = try services.clientFacing(baseURL: request.baseURL)
            return Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-cache"],
                body: .init(byteBuffer: ByteBuffer(bytes: body))
            )
        }
    }
}
