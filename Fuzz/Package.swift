// swift-tools-version:6.2
// libFuzzer targets for CrashGuard's ingest pipeline, reason normalizer (issues 9, 13),
// debug-file reader (issue 41), the crash list's search language (issue 47) and the report
// scrubber (issue 49).
//
// A package of its own, so the fuzz executables (which only link with -sanitize=fuzzer)
// never enter the main package's product set. It depends on the main package by path and
// fuzzes its real modules: CrashIngest (the server's pipeline from body bytes to signed
// reports), CrashGrouping and CrashDebugFiles (the ELF reader uploads go through). Built and
// run by scripts/fuzz.
import PackageDescription

let fuzzFlags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "CrashGuardFuzz",
    dependencies: [
        .package(name: "CrashGuard", path: "..")
    ],
    targets: [
        .target(name: "FuzzDriver"),
        .executableTarget(
            name: "FuzzIngest",
            dependencies: [.product(name: "CrashIngest", package: "CrashGuard"), "FuzzDriver"],
            swiftSettings: fuzzFlags),
        .executableTarget(
            name: "FuzzELF",
            dependencies: [.product(name: "CrashDebugFiles", package: "CrashGuard"), "FuzzDriver"],
            swiftSettings: fuzzFlags),
        .executableTarget(
            name: "FuzzMachO",
            dependencies: [.product(name: "CrashDebugFiles", package: "CrashGuard"), "FuzzDriver"],
            swiftSettings: fuzzFlags),
        // The server's search-language parser, compiled from its own file (a link into
        // Sources/CrashServer/Query): it needs only CrashWire, not the server.
        .executableTarget(
            name: "FuzzSearchQuery",
            dependencies: [.product(name: "CrashIngest", package: "CrashGuard"), "FuzzDriver"],
            swiftSettings: fuzzFlags),
        .executableTarget(
            name: "FuzzScrubber",
            dependencies: [.product(name: "CrashIngest", package: "CrashGuard"), "FuzzDriver"],
            swiftSettings: fuzzFlags),
        .executableTarget(
            name: "FuzzNormalizer",
            dependencies: [.product(name: "CrashIngest", package: "CrashGuard"), "FuzzDriver"],
            swiftSettings: fuzzFlags),
    ]
)
