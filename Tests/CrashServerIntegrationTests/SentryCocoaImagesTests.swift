import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Sentry Cocoa events (`apple.md`, "Sentry Cocoa events: images and instruction addresses"):
/// frames without a function in `debug_meta`'s Mach-O images are written as Apple's image +
/// offset line, the images are kept in `context`, and such crashes group by image + offset,
/// stable across load addresses, against the real PostgreSQL.
@Suite struct SentryCocoaImagesTests {
    static let now = Date()

    /// The recorded-shape Cocoa event of Tests/Fixtures/apple (sentry-cocoa 8.x layout).
    static func event() throws -> [String: Any] {
        let url = TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/apple/sentry-cocoa-event.json")
        return try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as! [String: Any]
    }

    static func report(_ event: [String: Any]) throws -> Report {
        try SentryEvent.decode(Array(try JSONSerialization.data(withJSONObject: event))).report(receivedAt: now)
    }

    static func hex(_ value: UInt64) -> String { String(format: "0x%016llx", value) }

    /// `event` with the app's two images (`Crashy`, `CrashyKit`) loaded `slide` bytes further,
    /// every address in them moved alike (ASLR), under a new event id.
    static func slid(_ event: [String: Any], by slide: UInt64, innermostOffsetDelta: UInt64 = 0) -> [String: Any] {
        func move(_ text: Any?, _ delta: UInt64) -> String? {
            guard let text = text as? String, let value = UInt64(text.dropFirst(2), radix: 16) else { return nil }
            return hex(value + delta)
        }
        var event = event
        event["event_id"] = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        var meta = event["debug_meta"] as! [String: Any]
        meta["images"] = (meta["images"] as! [[String: Any]]).map { image in
            var image = image
            if (image["code_file"] as! String).contains("Crashy.app") { image["image_addr"] = move(image["image_addr"], slide) }
            return image
        }
        event["debug_meta"] = meta
        var exception = event["exception"] as! [String: Any]
        var values = exception["values"] as! [[String: Any]]
        var stacktrace = values[0]["stacktrace"] as! [String: Any]
        var frames = stacktrace["frames"] as! [[String: Any]]
        for i in frames.indices where (frames[i]["package"] as! String).contains("Crashy.app") {
            let delta = slide + (i == frames.count - 1 ? innermostOffsetDelta : 0)
            frames[i]["image_addr"] = move(frames[i]["image_addr"], slide)
            frames[i]["instruction_addr"] = move(frames[i]["instruction_addr"], delta)
            if frames[i]["symbol_addr"] != nil { frames[i]["symbol_addr"] = move(frames[i]["symbol_addr"], slide) }
        }
        stacktrace["frames"] = frames
        values[0]["stacktrace"] = stacktrace
        exception["values"] = values
        event["exception"] = exception
        return event
    }

    // MARK: Mapping

    @Test func framesInMachOImagesBecomeImageAndOffset() throws {
        let report = try Self.report(try Self.event())
        #expect(report.id == UUID(uuidString: "3f1c9a7e-5b2d-4c6e-8a0b-1c2d3e4f5a6b"))
        #expect(report.kind == .exception)
        #expect(report.reason == "EXC_BAD_ACCESS: KERN_INVALID_ADDRESS at 0x10")
        #expect(report.fatal == true)
        // The in-app frames, innermost first: `<redacted>` and function-less frames alike.
        #expect(
            report.stack == [
                "0 Crashy 0x10291b98c 0x102914000 + 31116", "1 Crashy 0x10291da20 0x102914000 + 39456",
                "2 CrashyKit 0x103456378 0x103450000 + 25464",
            ])
        // The images of those frames, debug ids in lower case, before the environment.
        #expect(
            report.context == [
                "image.0": "0x102914000 81920 6f0a3c1e-5b2d-3c4e-9a8f-1d2e3f405162 Crashy",
                "image.1": "0x103450000 557056 0d9e8f7a-6b5c-3d4e-8f1a-2b3c4d5e6f70 CrashyKit",
                "environment": "production",
            ])
        #expect(report.app == AppInfo(id: "com.example.crashy", version: "2.3.1", build: "417"))
        #expect(report.validationError(now: Self.now) == nil)
    }

    @Test func framesWithAFunctionOrOutsideTheImagesKeepTheirForm() throws {
        var event = try Self.event()
        var exception = event["exception"] as! [String: Any]
        var values = exception["values"] as! [[String: Any]]
        var stacktrace = values[0]["stacktrace"] as! [String: Any]
        var frames = stacktrace["frames"] as! [[String: Any]]
        // A function the device resolved; an address in no image; a frame without an address.
        frames[6]["function"] = "-[CrashViewController crash:]"
        frames[5]["instruction_addr"] = "0x0000000000001000"
        frames[4]["instruction_addr"] = nil
        stacktrace["frames"] = frames
        values[0]["stacktrace"] = stacktrace
        exception["values"] = values
        event["exception"] = exception
        var report = try Self.report(event)
        #expect(report.stack == ["-[CrashViewController crash:] (Crashy)", "? (Crashy)", "<redacted> (CrashyKit)"])
        #expect(report.context == ["environment": "production"])
        // Images of another type than macho (or without a debug id) are not Mach-O images.
        event = try Self.event()
        var meta = event["debug_meta"] as! [String: Any]
        meta["images"] = (meta["images"] as! [[String: Any]]).map { image in
            var image = image
            image["type"] = "elf"
            return image
        }
        event["debug_meta"] = meta
        report = try Self.report(event)
        #expect(report.stack == ["<redacted> (Crashy)", "? (Crashy)", "<redacted> (CrashyKit)"])
    }

    @Test func imagesAreKeptBeforeTags() throws {
        var event = try Self.event()
        event["tags"] = Dictionary(uniqueKeysWithValues: (0..<80).map { ("tag\($0)", "v") })
        let report = try Self.report(event)
        #expect(report.context?.count == 64)
        #expect(report.context?["image.0"] != nil)
        #expect(report.context?["image.1"] != nil)
        #expect(report.context?["environment"] == "production")
    }

    // MARK: Grouping, against the real database

    /// Sends each event in its own envelope; every answer must be 200.
    static func send(_ events: [[String: Any]], to project: ProjectCredentials) async throws {
        let bodies = events.map { SentryIngestTests.eventEnvelope($0) }
        try await withApp { client in
            for body in bodies {
                let response = try await client.sentry(
                    "/api/\(project.sentryId)/envelope/", headers: SentryIngestTests.auth(project.ingestKey), body: body)
                #expect(response.status == .ok)
            }
        }
    }

    @Test func oneCrashAtTwoLoadAddressesIsOneGroupAndTwoSitesAreTwo() async throws {
        let project = try await makeProject()
        let event = try Self.event()
        try await Self.send([event, Self.slid(event, by: 0x2_4000), Self.slid(event, by: 0x7_0000)], to: project)
        var groups = try await withTestDatabase { try await $0.groups(slug: project.project) }
        #expect(groups.count == 1)
        #expect(groups.first?.count == 3)
        // Another crash site in the same image (its innermost frame 0x40 further): a group of its own.
        try await Self.send([Self.slid(event, by: 0x1000, innermostOffsetDelta: 0x40)], to: project)
        groups = try await withTestDatabase { try await $0.groups(slug: project.project) }
        #expect(groups.map(\.count) == [3, 1])
        let stored = try await SentryIngestTests().storedReports(project.project)
        #expect(stored.count == 4)
        #expect(Set(stored.compactMap { $0.stack?.first }).count == 4)
    }

    @Test func aV1ProjectKeepsV1Rules() async throws {
        let slug = "a1-" + UUID().uuidString.lowercased().prefix(12)
        let project = try await withTestDatabase {
            try await PostgresProjectStore(database: $0).create(slug: String(slug), grouping: .v1)
        }
        let event = try Self.event()
        try await Self.send([event, Self.slid(event, by: 0x2_4000)], to: project)
        let groups = try await withTestDatabase { try await $0.groups(slug: project.project) }
        #expect(groups.count == 1)
        let report = try Self.report(event)
        let v1 = Grouping.signature(kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: nil, version: .v1)
        #expect(groups.first?.signature == v1.hash)
    }
}
