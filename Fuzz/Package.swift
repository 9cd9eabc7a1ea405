// swift-tools-version:6.2
// libFuzzer targets for CrashGuard's ingest decoding and reason normalizer (issue 9).
//
// A package of its own, so the fuzz executables (which only link with -sanitize=fuzzer)
// never enter the main package's product set. It compiles the server's sources as they
// are, through symlinks: CrashWire, CZlib, CrashCompression, CrashGrouping, and the
// server's IncomingBatch.swift and IngestDecoding.swift (with a stand-in for APIError).
// Built and run by scripts/fuzz.
import PackageDescription

let fuzzFlags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "CrashGuardFuzz",
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3")
    ],
    targets: [
        .target(name: "CrashWire"),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib"),
        .target(name: "CrashCompression", dependencies: ["CZlib"]),
        .target(name: "CrashGrouping", dependencies: ["CrashWire", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "HTTPTypes"),
        .target(name: "IngestCore", dependencies: ["CrashWire", "CrashCompression", "CrashGrouping", "HTTPTypes"]),
        .target(name: "FuzzDriver"),
        .executableTarget(name: "FuzzIngest", dependencies: ["IngestCore", "CrashCompression", "FuzzDriver"], swiftSettings: fuzzFlags),
        .executableTarget(name: "FuzzNormalizer", dependencies: ["CrashGrouping", "CrashWire", "FuzzDriver"], swiftSettings: fuzzFlags),
    ]
)
