import CrashWire
import Foundation
import Testing

@testable import CrashGuard

/// Guard reports carry the stack as return addresses with their images, in the crash
/// record's form (`"<i> <image> 0x<address> …"` and `image.N` = base, size, build id,
/// path), so a server holding the build's debug file resolves them like crash frames.
@Suite("Guard stacks: addresses and images")
struct GuardStackTests {
    final class Sink: GuardEventSink, @unchecked Sendable {
        private let lock = NSLock()
        private var storage: [GuardEvent] = []
        func record(_ event: GuardEvent) { lock.withLock { storage.append(event) } }
        var events: [GuardEvent] { lock.withLock { storage } }
    }

    @inline(never) func tripGuard() -> Int? { [1, 2, 3][guarded: 5] }

    #if os(Linux)
    @Test("a guard's report has raw addresses in images with this binary's build id, and they resolve to the caller offline")
    func guardReportCarriesAddresses() throws {
        let sink = Sink()
        GuardRecorder.withSink(sink) { _ = tripGuard() }
        let event = try #require(sink.events.first)
        let images = ReportImages(context: event.context)
        #expect(!images.entries.isEmpty)
        // The recorder's own frames (capture, GuardStack.frames, GuardRecorder.record) are left out.
        #expect(event.context["crash.machineryFrames"] == "3")

        // Every frame is "<i> <image> 0x<address> ..." and falls in an image it names.
        var addresses: [UInt64] = []
        for (i, frame) in event.stack.enumerated() {
            let parts = frame.split(separator: " ", maxSplits: 3)
            try #require(parts.count >= 3, "\(frame)")
            #expect(parts[0] == "\(i)")
            let address = try #require(UInt64(parts[2].dropFirst(2), radix: 16), "\(frame)")
            addresses.append(address)
            if parts[1] != "???" {
                #expect(images.entries.contains { $0.name == parts[1] && $0.contains(address) }, "\(frame)")
            }
        }

        // The executable's image entry carries the file's own build id: what an uploaded
        // debug file is matched by.
        let executable = try #require(images.entries.first { $0.path == Bundle.main.executablePath || $0.name.hasSuffix(".xctest") })
        #expect(!executable.buildID.isEmpty)
        #expect(Symbolicator.buildID(ofFile: executable.path) == executable.buildID)

        // Resolved the way the server does (image + offset in the file with that build id),
        // the frames name the guard's caller.
        let symbolicator = Symbolicator(crashed: [executable], current: [])
        let names = addresses.compactMap { symbolicator.resolve($0, isReturnAddress: true).symbol }
        #expect(names.contains { $0.contains("tripGuard") }, "\(names)")
        let first = try #require(addresses.first.flatMap { symbolicator.resolve($0, isReturnAddress: true).symbol })
        #expect(!first.contains("GuardRecorder") && !first.contains("GuardStack"), "\(first)")
    }
    #endif

    @Test("the image list is cached until an image is loaded or unloaded")
    func imageCacheFollowsTheLoader() throws {
        let first = ImageCache.shared.images()
        #expect(!first.isEmpty)
        #expect(ImageCache.shared.images() == first)
        #if os(Linux)
        // A library not loaded yet (libz is linked; libm is always there: pick one that is not).
        let candidates = ["libutil.so.1", "libanl.so.1", "libnss_dns.so.2", "libresolv.so.2"]
        let name = try #require(candidates.first { name in !first.contains { $0.name == name } }, "all candidates loaded")
        let handle = try #require(dlopen(name, RTLD_NOW))
        defer { dlclose(handle) }
        #expect(ImageCache.shared.images().contains { $0.name == name })
        #endif
    }

    #if os(Linux)
    @Test("a library loaded after start joins the crash session's image map at the next report")
    func dlopenedImageJoinsTheCrashSession() async {
        let directory = CrashChild.prepare("dlopen-session")
        await #expect(processExitsWith: .success) {
            let directory = CrashChild.directory("dlopen-session")
            let loaded = LoadedImage.current()
            guard
                let name = ["libutil.so.1", "libanl.so.1", "libnss_dns.so.2", "libresolv.so.2"].first(where: { name in
                    !loaded.contains { $0.name == name }
                })
            else { exit(89) }
            do { try CrashCapture.install(directory: directory, app: CrashChild.app, device: DeviceInfo()) } catch { exit(90) }
            func mapped() -> Bool {
                let data = (try? Data(contentsOf: CrashCapture.sessionURL(directory))) ?? Data()
                let session = try? JSONDecoder().decode(CrashCapture.Session.self, from: data)
                return session?.images.contains { $0.name == name } == true
            }
            guard !mapped(), dlopen(name, RTLD_NOW) != nil else { exit(91) }
            GuardRecorder.withSink(Sink()) { _ = [Int]()[guarded: 1] }
            exit(mapped() ? 0 : 92)
        }
        _ = directory
    }
    #endif
}

/// The `image.N` entries of a report's context, as the server reads them.
struct ReportImages {
    var entries: [LoadedImage]

    init(context: [String: String]) {
        entries = context.filter { $0.key.hasPrefix("image.") }.sorted { $0.key < $1.key }.compactMap { _, value in
            let parts = value.split(separator: " ", maxSplits: 3)
            guard parts.count == 4, let base = UInt64(parts[0].dropFirst(2), radix: 16), let size = UInt64(parts[1]) else {
                return nil
            }
            return LoadedImage(path: String(parts[3]), base: base, size: size, buildID: parts[2] == "-" ? "" : String(parts[2]))
        }
    }
}
