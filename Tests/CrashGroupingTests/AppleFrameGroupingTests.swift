import CrashGrouping
import CrashWire
import Testing

/// Apple's unsymbolicated frames (`"<i> <image> 0x<address> 0x<load address> + <offset>"`, the
/// form of `.ips`, MetricKit and Sentry Cocoa frames on the server, `apple.md`): grouped by image
/// and offset, never by address, so one crash at two load addresses (ASLR) is one group and two
/// crash sites in one image are two.
@Suite("Apple frames")
struct AppleFrameGroupingTests {
    /// One crash site in `Crashy` and its callers, with the images loaded at `slide` past their
    /// usual addresses; `site` is the innermost frame's offset.
    static func stack(slide: UInt64, site: UInt64 = 31116, image: String = "Crashy") -> [String] {
        let app: UInt64 = 0x1_0291_4000 + slide
        let kit: UInt64 = 0x1_0345_0000 + slide
        let dispatch: UInt64 = 0x1_bc77_0000 + slide
        func hex(_ v: UInt64) -> String { "0x" + String(v, radix: 16) }
        return [
            "0 \(image) \(hex(app + site)) \(hex(app)) + \(site)",
            "1 \(image) \(hex(app + 39456)) \(hex(app)) + 39456",
            "2 CrashyKit \(hex(kit + 25464)) \(hex(kit)) + 25464",
            "3 libdispatch.dylib \(hex(dispatch + 6876)) _dispatch_call_block_and_release + 32",
        ]
    }

    static func signature(_ stack: [String], _ version: GroupingVersion, kind: ReportKind = .signal) -> Signature {
        Grouping.signature(
            kind: kind, reason: "EXC_BAD_ACCESS (SIGSEGV): KERN_INVALID_ADDRESS at 0x0000000000000010", stack: stack,
            fingerprint: nil, version: version)
    }

    @Test("an unsymbolicated frame normalizes to image and offset", arguments: GroupingVersion.allCases)
    func normalizedFrame(_ version: GroupingVersion) {
        #expect(Grouping.normalize(frame: "0 Crashy 0x10291b98c 0x102914000 + 31116", version: version) == "Crashy 0x? + 31116")
        #expect(
            Grouping.normalize(frame: "12 Crashy 0x000000010491b98c 0x0000000104914000 + 31116", version: version)
                == "Crashy 0x? + 31116")
        #expect(
            Grouping.normalize(frame: "3 libdispatch.dylib 0x1bc771adc _dispatch_call_block_and_release + 32", version: version)
                == "libdispatch.dylib _dispatch_call_block_and_release")
    }

    @Test("one crash at two load addresses is one group", arguments: GroupingVersion.allCases)
    func aslrStable(_ version: GroupingVersion) {
        let here = Self.signature(Self.stack(slide: 0), version)
        for slide: UInt64 in [0x4000, 0x2_0000_0000, 0x123_4000] {
            #expect(Self.signature(Self.stack(slide: slide), version).hash == here.hash)
        }
        // An image whose name has a space: still image and offset.
        #expect(
            Self.signature(Self.stack(slide: 0, image: "My App"), version).hash
                == Self.signature(Self.stack(slide: 0x8000, image: "My App"), version).hash)
    }

    @Test("two crash sites in one image are two groups", arguments: GroupingVersion.allCases)
    func sitesSplit(_ version: GroupingVersion) {
        #expect(Self.signature(Self.stack(slide: 0), version).hash != Self.signature(Self.stack(slide: 0, site: 31240), version).hash)
    }

    @Test func appFramesAreTheAppsAndSystemImagesTheSystems() {
        let stack = Self.stack(slide: 0x4000)
        #expect(FrameClassifier.classify(stack[0]).role == .app)
        #expect(FrameClassifier.classify(stack[2]).role == .app)
        #expect(FrameClassifier.classify(stack[3]).role == .system)
        #expect(FrameClassifier.classify("7 libsystem_kernel.dylib 0x1e05a88c0 0x1e05a8000 + 2240").role == .system)
        // v2 signs the first three app frames: the system frame below them never counts.
        #expect(Grouping.signatureFrames(stack).map(\.index) == [0, 1, 2])
        // Any kind with a stack (v2), not only signal and exception.
        #expect(
            Self.signature(Self.stack(slide: 0), .v2, kind: .exception).hash
                == Self.signature(Self.stack(slide: 0x8000), .v2, kind: .exception).hash)
    }
}
