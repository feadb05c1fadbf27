// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "foyer",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "foyer", targets: ["FoyerCLI"]),
        .executable(name: "foyer-floor", targets: ["FoyerFloor"]),
        .library(name: "Foyer", targets: ["Foyer"]),
    ],
    dependencies: [
        // FullFoundation only: the ConfigurationSupport trait would pull swift-configuration, which we do not use.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        // HTTP/2 over TLS; async-http-client builds it already.
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        // Certificate signing requests (ACME) and certificates read and made; async-http-client builds them already.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/GraphQLSwift/GraphQL.git", from: "4.3.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // The operator's terms may be Markdown: Ink is a small Markdown-to-HTML parser with no dependencies.
        .package(url: "https://github.com/JohnSundell/Ink.git", from: "0.6.0"),
    ],
    targets: [
        // libcurl speaks SMTP (STARTTLS, AUTH, SMTPS); its options are set through a variadic C function. The shim
        // loads libcurl at the first mail (dlopen): only its headers are needed to build.
        .target(name: "CCurlSMTP"),
        // zlib's CRC-32 functions, for gzip answers joined from pieces deflated ahead (Operations/GzipMember.swift).
        .systemLibrary(name: "CZlib"),
        // Pictures through libvips (Debian's libvips-dev), as Rails' image_processing uses it; its options go through
        // variadic C functions, which the shim calls. The shim loads libvips at the first picture (dlopen), so only
        // the headers are needed to build: libvips' own and GLib's (pkg-config's flags would also link it).
        .target(
            name: "CVips",
            cSettings: [.unsafeFlags([
                "-I/usr/include/glib-2.0",
                "-I/usr/lib/x86_64-linux-gnu/glib-2.0/include", "-I/usr/lib/aarch64-linux-gnu/glib-2.0/include",
            ])]
        ),
        // The server layer: connections, the edge's rules, HTTP/2, TLS and certificates, deploys. It knows no feature;
        // the features' module assembles it with them (App/BuildApplication.swift).
        .target(
            name: "FoyerServer",
            dependencies: [
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA keys of certificate files checked against their certificate.
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .target(
            name: "Foyer",
            dependencies: [
                "FoyerServer",
                "CCurlSMTP",
                "CVips",
                "CZlib",
                // Features' own flags live with them as option groups (Mail/MailOptions).
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA for DPoP proofs (already built: jwt-kit uses it).
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GraphQL", package: "GraphQL"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Ink", package: "Ink"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            // Data, not Swift source: word lists, catalogs, the schema new databases are made from.
            resources: [.copy("Resources/common-passwords.txt"), .copy("Resources/Languages"), .copy("Resources/sqlite-schema.sql")]
        ),
        // For scripts/bench alone: the floor under Foyer's figures (see its main.swift).
        .executableTarget(
            name: "FoyerFloor",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "FoyerCLI",
            dependencies: [
                "Foyer",
                "FoyerServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .testTarget(
            name: "FoyerTests",
            dependencies: [
                "Foyer",
                "FoyerServer",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSTesting", package: "hummingbird-websocket"),
                // Its websocket client's close frames; the server's sockets are Foyer's own (GraphQLSocket).
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]
        ),
    ]
)
