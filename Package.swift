// swift-tools-version:6.2
// CrashGuard: crash guards for Swift apps, and the server that groups what they report.

import PackageDescription

/// The same strict settings on every target (see swift-log's and hummingbird's Package.swift).
/// `InternalImportsByDefault` is left off on purpose: the SDK is used from app code where
/// re-exported Foundation types are part of its API; `ExistentialAny` and
/// `MemberImportVisibility` keep dependencies visible and explicit.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// What the server's shared test helpers (CrashServerTestSupport) import.
let serverTestSupportDependencies: [Target.Dependency] = [
    "CrashServer", "CrashWire", "CrashCompression", "CrashGrouping", "CrashGuard", "CrashIngest",
    "CrashGuardObjC", "CodecTestSupport", "CrashDebugFiles",
    .product(name: "Hummingbird", package: "hummingbird"),
    .product(name: "HummingbirdTesting", package: "hummingbird"),
    .product(name: "PostgresNIO", package: "postgres-nio"),
    .product(name: "AsyncHTTPClient", package: "async-http-client"),
    .product(name: "Logging", package: "swift-log"),
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "HTTPTypes", package: "swift-http-types"),
    .product(name: "NIOHTTP1", package: "swift-nio"),
    .product(name: "Mustache", package: "swift-mustache"),
    .product(name: "Crypto", package: "swift-crypto"),
]

/// What both of the server's test targets (unit and integration) import.
let serverTestDependencies: [Target.Dependency] =
    ["CrashServerTestSupport", "SeededRandom"] + serverTestSupportDependencies + [.product(name: "JWTKit", package: "jwt-kit")]

let package = Package(
    name: "CrashGuard",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .library(name: "CrashGuard", targets: ["CrashGuard"]),
        .library(name: "CrashWire", targets: ["CrashWire"]),
        // For the fuzz package (Fuzz/), which builds the server's ingest pipeline as it is.
        .library(name: "CrashIngest", targets: ["CrashIngest", "CrashGrouping", "CrashCompression"]),
        // For the fuzz package: the debug-file reader the upload route runs on hostile files.
        .library(name: "CrashDebugFiles", targets: ["CrashDebugFiles"]),
        .executable(name: "crash-server", targets: ["crash-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Up to 5: jwt-kit (OpenID Connect ID tokens) needs 4 or newer.
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"6.0.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
    ],
    targets: [
        // Wire format: report types, kinds, limits, header names. Foundation only.
        .target(name: "CrashWire", swiftSettings: strict),
        // System zlib, linked through a system-library target.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
        // System brotli and zstd decoders, for the server's ingest only (never the SDK).
        .systemLibrary(name: "CBrotli", pkgConfig: "libbrotlidec", providers: [.apt(["libbrotli-dev"]), .brew(["brotli"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"]), .brew(["zstd"])]),
        // ISA-L's igzip: the server's gzip decoder (GzipDecoder), never the SDK's.
        .systemLibrary(name: "CIsal", pkgConfig: "libisal", providers: [.apt(["libisal-dev"]), .brew(["isa-l"])]),
        // System Argon2 (the reference implementation): account passwords are hashed with Argon2id.
        .systemLibrary(name: "CArgon2", pkgConfig: "libargon2", providers: [.apt(["libargon2-dev"]), .brew(["argon2"])]),
        // RE2 (C++, linear time) behind a small C interface: the scrubber's project patterns.
        .target(name: "CRE2", linkerSettings: [.linkedLibrary("re2")]),
        // gzip/deflate encode and capped streaming inflate.
        .target(name: "CrashCompression", dependencies: ["CZlib"], swiftSettings: strict),
        // A cache prefetch hint for the grouping's frame reads (a C header: Swift has none).
        .target(name: "CPrefetch"),
        // Reason and frame normalization, frame selection and signatures (v1, v2).
        .target(
            name: "CrashGrouping",
            dependencies: ["CrashWire", "CPrefetch", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strict
        ),
        // The ingest pipeline from request bytes to validated, signed reports: capped
        // decoding, the streaming JSON reader, validation. No HTTP, no database.
        .target(
            name: "CrashIngest",
            dependencies: [
                "CrashWire", "CrashCompression", "CrashGrouping", "CBrotli", "CZstd", "CIsal", "CRE2",
                // SHA-256: the ids of MetricKit diagnostics (AppleCrashReports).
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict),
        // The ELF debug-file reader (build id, load address, bounded header and note parsing).
        // No dependencies, so the fuzz package builds it alone.
        .target(name: "CrashDebugFiles", swiftSettings: strict),
        // Async-signal-safe crash handler, image map and symbol lookup for the SDK (C).
        .target(name: "CCrashCapture"),
        // Objective-C runtime guards (swizzled class clusters, forwarding stub, KVO proxy ...) for
        // existing Objective-C code. Apple platforms: an ordinary Objective-C target. Linux: the
        // sources compile to nothing here; scripts/objc-test builds them against GNUstep.
        .target(name: "CrashGuardObjC"),
        // The guard SDK: guards, reporter, crash capture. Never imports the server.
        .target(
            name: "CrashGuard", dependencies: ["CrashWire", "CrashCompression", "CCrashCapture", "CrashGuardObjC"],
            swiftSettings: strict),
        // The ingest and query server: wiring, routes, batcher, store, configuration.
        .target(
            name: "CrashServer",
            dependencies: [
                "CrashWire", "CrashCompression", "CrashGrouping", "CrashIngest", "CrashDebugFiles", "CArgon2",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Mustache", package: "swift-mustache"),
                // OpenID Connect: ID tokens verified against the provider's JWKS (RS256, ES256).
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            // schema.sql and docs/openapi.json compiled into the binary (no bundle to ship):
            // Resources/ holds relative symlinks to the checked-in files, the one source; and
            // the dashboard's templates and stylesheet.
            resources: [
                .embedInCode("Resources/schema.sql"), .embedInCode("Resources/openapi.json"),
                .embedInCode("Dashboard/Resources"),
            ],
            swiftSettings: strict
        ),
        // @main: parses configuration, runs.
        .executableTarget(
            name: "crash-server",
            dependencies: [
                "CrashServer", "CrashGrouping",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The example app (guards, scope, crashes on demand). The crash-capture tests and
        // scripts/test.d/40-example run its release build (`swift build -c release --product
        // crashguard-example`, as scripts/test does), optimized like a shipped app; no unsafe
        // flags, so the package stays usable as a dependency by version.
        .executableTarget(
            name: "crashguard-example", dependencies: ["CrashGuard"], path: "Examples/crashguard-example",
            swiftSettings: strict),
        // A seeded random generator for generated traffic and replayable random tests.
        .target(name: "SeededRandom", swiftSettings: strict),
        // Load generator and micro-benchmarks.
        .executableTarget(
            name: "crash-bench",
            dependencies: [
                "CrashWire", "CrashCompression", "CrashGrouping", "CrashIngest", "SeededRandom",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // Tests only: the brotli encoder, and br/zstd test bodies for the ingest and route tests.
        .systemLibrary(
            name: "CBrotliEncoder", path: "Tests/CBrotliEncoder", pkgConfig: "libbrotlienc",
            providers: [.apt(["libbrotli-dev"]), .brew(["brotli"])]),
        .target(name: "CodecTestSupport", dependencies: ["CBrotliEncoder", "CZstd"], path: "Tests/CodecTestSupport"),
        .testTarget(name: "CrashWireTests", dependencies: ["CrashWire"], swiftSettings: strict),
        .testTarget(name: "CrashCompressionTests", dependencies: ["CrashCompression"], swiftSettings: strict),
        .testTarget(
            name: "CrashIngestTests",
            dependencies: ["CrashIngest", "CrashWire", "CrashCompression", "CrashGrouping", "CodecTestSupport", "SeededRandom"],
            swiftSettings: strict),
        .testTarget(
            name: "CrashGroupingTests",
            dependencies: ["CrashGrouping", "SeededRandom"],
            resources: [.copy("Corpus")],
            swiftSettings: strict
        ),
        // The guards' tests and the reporter's tests are separate modules, so their helpers never clash.
        .testTarget(
            name: "CrashGuardTests", dependencies: ["CrashGuard", "CrashCompression"],
            path: "Tests/CrashGuardTests/Guards", swiftSettings: strict),
        .testTarget(
            name: "CrashGuardReporterTests", dependencies: ["CrashGuard", "CrashWire", "CrashCompression"],
            path: "Tests/CrashGuardTests/Reporter", swiftSettings: strict),
        // What the server's two test targets share: the test environment (the test database's
        // URL, configurations, the in-process app), hostile sockets, webhook receivers, spawned
        // servers and clusters, crafted ELF files. A library, so both import it (@testable).
        .target(
            name: "CrashServerTestSupport",
            dependencies: serverTestSupportDependencies,
            path: "Tests/CrashServerTestSupport", swiftSettings: strict),
        // The server's unit and in-memory route tests: no database, no process, no live server.
        .testTarget(
            name: "CrashServerTests",
            dependencies: serverTestDependencies,
            swiftSettings: strict
        ),
        // The server against a real PostgreSQL (CRASHGUARD_TEST_DATABASE_URL), live servers and
        // spawned processes; scripts/test runs them one at a time.
        .testTarget(
            name: "CrashServerIntegrationTests",
            dependencies: serverTestDependencies,
            swiftSettings: strict
        ),
    ]
)
