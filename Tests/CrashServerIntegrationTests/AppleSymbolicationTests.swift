import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Read-time symbolication of Apple frames (apple.md, "Symbolication at read time"): Sentry
/// Cocoa events and MetricKit reports whose frames are `"<i> <image> 0x<address> 0x<base> +
/// <offset>"`, resolved by the image's UUID against the Mach-O files and dSYMs of
/// Tests/Fixtures/apple/debug-files (crashy.c: `inner` at 0x100000320, called from `main` at
/// 0x10000030c with `middle` inlined there; x86_64: `inner` at 0x100000364, the call at
/// 0x100000348), against the real PostgreSQL and llvm-symbolizer.
@Suite(.serialized) struct AppleSymbolicationTests {
    static let arm64 = MachOUploadTests.arm64UUID
    static let x86 = MachOUploadTests.x86UUID
    static let appPath = "/private/var/containers/Bundle/Application/1B7C2E4A/Crashy.app/Crashy"

    /// A Sentry Cocoa crash event of `Crashy` (image `uuid`, loaded at `base`) whose stack,
    /// innermost first, is at `offsets` into the image; no frame has a function.
    static func cocoaEvent(uuid: String, base: UInt64, offsets: [UInt64], arch: String = "arm64") throws -> [String: Any] {
        var event = try SentryCocoaImagesTests.event()
        event["event_id"] = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        event["debug_meta"] = [
            "images": [
                [
                    "type": "macho", "debug_id": uuid.uppercased(), "code_file": appPath, "image_addr": SentryCocoaImagesTests.hex(base),
                    "image_size": 0x4000, "image_vmaddr": "0x0000000100000000", "arch": arch,
                ]
            ]
        ]
        event["threads"] = nil
        let frames: [[String: Any]] = offsets.reversed().map { offset in
            [
                "package": appPath, "image_addr": SentryCocoaImagesTests.hex(base),
                "instruction_addr": SentryCocoaImagesTests.hex(base + offset), "in_app": true,
            ]
        }
        var exception = event["exception"] as! [String: Any]
        var values = exception["values"] as! [[String: Any]]
        values[0]["stacktrace"] = ["frames": frames]
        exception["values"] = values
        event["exception"] = exception
        return event
    }

    /// The reports of the project's only group, newest first, as the read API gives them.
    static func reports(_ client: some TestClientProtocol, _ project: ProjectCredentials) async throws -> [[String: Any]] {
        let list = try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken)
        let groups = list.json["groups"] as? [[String: Any]] ?? []
        #expect(groups.count == 1)
        let id = try #require(groups.first?["id"] as? String)
        let page = try await client.query("/v1/projects/\(project.project)/crashes/\(id)/reports", token: project.readToken)
        return page.json["reports"] as? [[String: Any]] ?? []
    }

    static func upload(_ client: some TestClientProtocol, _ project: ProjectCredentials, _ fixture: String) async throws {
        let (status, body) = try await MachOUploadTests().upload(client, project, try MachOUploadTests.fixture(fixture), name: fixture)
        #expect(status == .created, "\(body)")
    }

    /// The `symbolicated` entries of `report` by frame index.
    static func frames(_ report: [String: Any]) -> [Int: [String: Any]] {
        var frames: [Int: [String: Any]] = [:]
        for entry in report["symbolicated"] as? [[String: Any]] ?? [] {
            if let index = entry["frame"] as? Int { frames[index] = entry }
        }
        return frames
    }

    /// Frame 0 is the crashing instruction in `inner`; frame 1 returns into `main` just after
    /// the call, looked up one byte back: `middle`, inlined into `main` at that call.
    static func expectCrashyDWARF(_ report: [String: Any]) {
        let frames = Self.frames(report)
        #expect(frames.count == 2, "\(report)")
        #expect(frames[0]?["function"] as? String == "inner")
        #expect(frames[0]?["file"] as? String == "./crashy.c")
        #expect(frames[0]?["line"] as? Int == 1)
        #expect(frames[0]?["debugId"] as? String == arm64)
        #expect(frames[0]?["buildId"] == nil)
        #expect(frames[0]?["image"] as? String == "Crashy")
        #expect(frames[1]?["function"] as? String == "main")
        #expect(frames[1]?["line"] as? Int == 3)
        let inlined = frames[1]?["inlined"] as? [[String: Any]] ?? []
        #expect(inlined.map { $0["function"] as? String } == ["middle"])
        #expect(inlined.first?["line"] as? Int == 2)
        #expect(inlined.first?["file"] as? String == "./crashy.c")
    }

    @Test func cocoaCrashAtTwoLoadAddressesIsOneGroupSymbolicatedOnceTheDSYMIsUploaded() async throws {
        let project = try await makeProject()
        // Stored before the upload, at two load addresses (ASLR).
        try await SentryCocoaImagesTests.send(
            [
                try Self.cocoaEvent(uuid: Self.arm64, base: 0x1_0291_4000, offsets: [0x320, 0x310]),
                try Self.cocoaEvent(uuid: Self.arm64, base: 0x1_04a3_8000, offsets: [0x320, 0x310]),
            ], to: project)
        try await withApp { client in
            let before = try await Self.reports(client, project)
            #expect(before.count == 2)
            #expect(before.allSatisfy { $0["symbolicated"] == nil })
            #expect(Set(before.compactMap { ($0["stack"] as? [String])?.first }).count == 2)

            try await Self.upload(client, project, "Crashy.dSYM.zip")
            let after = try await Self.reports(client, project)
            #expect(after.count == 2)
            for report in after { Self.expectCrashyDWARF(report) }
            // The stored stacks are what was sent.
            #expect(after.map { $0["stack"] as? [String] ?? [] } == before.map { $0["stack"] as? [String] ?? [] })

            // The detail's latest reports carry the same.
            let list = try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken)
            let id = try #require((list.json["groups"] as? [[String: Any]])?.first?["id"] as? String)
            let detail = try await client.query("/v1/projects/\(project.project)/crashes/\(id)", token: project.readToken)
            let latest = detail.json["latest"] as? [[String: Any]] ?? []
            #expect(latest.count == 2)
            for report in latest { Self.expectCrashyDWARF(report) }
        }
        // A crash stored after the upload: the same group, resolved at once.
        try await SentryCocoaImagesTests.send(
            [try Self.cocoaEvent(uuid: Self.arm64, base: 0x1_0500_0000, offsets: [0x320, 0x310])], to: project)
        try await withApp { client in
            let reports = try await Self.reports(client, project)
            #expect(reports.count == 3)
            for report in reports { Self.expectCrashyDWARF(report) }
        }
    }

    @Test func aFatFileSymbolicatesEachArchitectureWithItsOwnSlice() async throws {
        // The same crash on an Intel Mac and on Apple silicon, each in a project holding the fat file.
        let intel = try Self.cocoaEvent(uuid: Self.x86, base: 0x1_0a00_0000, offsets: [0x364, 0x34d], arch: "x86_64")
        let arm = try Self.cocoaEvent(uuid: Self.arm64, base: 0x1_0291_4000, offsets: [0x320, 0x310])
        for (event, uuid) in [(intel, Self.x86), (arm, Self.arm64)] {
            let other = try await makeProject()
            try await withApp { client in try await Self.upload(client, other, "Crashy-fat") }
            try await SentryCocoaImagesTests.send([event], to: other)
            try await withApp { client in
                let reports = try await Self.reports(client, other)
                let frames = Self.frames(try #require(reports.first))
                // Executables carry symbols, not DWARF: function names only.
                #expect(frames[0]?["function"] as? String == "inner")
                #expect(frames[1]?["function"] as? String == "main")
                #expect(frames[0]?["debugId"] as? String == uuid)
                #expect(frames[0]?["line"] == nil)
            }
        }
    }

    @Test func anotherProjectsDSYMIsNeverUsed() async throws {
        let owner = try await makeProject()
        let project = try await makeProject()
        try await withApp { client in try await Self.upload(client, owner, "Crashy.dSYM.zip") }
        try await SentryCocoaImagesTests.send(
            [try Self.cocoaEvent(uuid: Self.arm64, base: 0x1_0291_4000, offsets: [0x320, 0x310])], to: project)
        try await withApp { client in
            let reports = try await Self.reports(client, project)
            #expect(reports.count == 1)
            #expect(reports.first?["symbolicated"] == nil)
            // Once the project uploads its own, it is used.
            try await Self.upload(client, project, "Crashy.dSYM.zip")
            Self.expectCrashyDWARF(try #require(try await Self.reports(client, project).first))
        }
    }

    /// A MetricKit payload's frames (image size unknown, UUID in upper case, the stack a
    /// `subFrames` chain) resolve the same way.
    @Test func metricKitFramesAreSymbolicated() async throws {
        let project = try await makeProject()
        let base: UInt64 = 0x1_0291_4000
        let payload: [String: Any] = [
            "timeStampBegin": "2026-11-27 10:00:00", "timeStampEnd": "2026-11-27 11:00:00",
            "crashDiagnostics": [
                [
                    "diagnosticMetaData": [
                        "appVersion": "2.3.1", "appBuildVersion": "417", "bundleIdentifier": "com.example.crashy", "signal": 11,
                        "exceptionType": 1, "osVersion": "iPhone OS 17.2 (21C62)", "deviceType": "iPhone15,2",
                    ],
                    "callStackTree": [
                        "callStacks": [
                            [
                                "threadAttributed": true,
                                "callStackRootFrames": [
                                    [
                                        "binaryUUID": Self.arm64.uppercased(), "binaryName": "Crashy", "address": base + 0x320,
                                        "offsetIntoBinaryTextSegment": 0x320,
                                        "subFrames": [
                                            [
                                                "binaryUUID": Self.arm64.uppercased(), "binaryName": "Crashy", "address": base + 0x310,
                                                "offsetIntoBinaryTextSegment": 0x310,
                                            ]
                                        ],
                                    ]
                                ],
                            ]
                        ]
                    ],
                ]
            ],
        ]
        let body = ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: payload))
        try await withApp { client in
            let response = try await client.execute(
                uri: "/v1/apple/reports", method: .post,
                headers: [HTTPField.Name("X-Crash-Key")!: project.ingestKey, .contentType: "application/json"], body: body)
            #expect(response.status == .accepted)
            try await Self.upload(client, project, "Crashy.dSYM.zip")
            Self.expectCrashyDWARF(try #require(try await Self.reports(client, project).first))
        }
    }

    /// An `.ips` crash report's app frames (`"<i> Crashy 0x<address> 0x<base> + <offset>"`)
    /// resolve by the `usedImages` UUID the same way.
    @Test func ipsFramesAreSymbolicated() async throws {
        let project = try await makeProject()
        let text = String(decoding: try AppleIngestTests.fixture("crash-segv.ips"), as: UTF8.self)
        let newline = try #require(text.firstIndex(of: "\n"))
        var body = try #require(try JSONSerialization.jsonObject(with: Data(text[text.index(after: newline)...].utf8)) as? [String: Any])
        var images = try #require(body["usedImages"] as? [[String: Any]])
        images[0]["uuid"] = Self.arm64
        body["usedImages"] = images
        var threads = try #require(body["threads"] as? [[String: Any]])
        let faulting = try #require(body["faultingThread"] as? Int)
        var frames = try #require(threads[faulting]["frames"] as? [[String: Any]])
        frames[0]["imageOffset"] = 0x320
        frames[1]["imageOffset"] = 0x310
        threads[faulting]["frames"] = frames
        body["threads"] = threads
        let bytes = Array(text[...newline].utf8) + Array(try JSONSerialization.data(withJSONObject: body))
        try await withApp { client in
            let response = try await AppleIngestTests.post(client, key: project.ingestKey, body: bytes, encoding: nil)
            #expect(response.status == .accepted)
            try await Self.upload(client, project, "Crashy.dSYM.zip")
            Self.expectCrashyDWARF(try #require(try await Self.reports(client, project).first))
        }
    }
}
