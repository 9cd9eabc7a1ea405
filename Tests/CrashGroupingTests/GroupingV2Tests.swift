import CrashGrouping
import CrashWire
import Testing

/// Grouping v2: the normalizer's additions, frame classification, frame selection and the
/// signature scheme.
@Suite("Grouping v2")
struct GroupingV2Tests {
    // MARK: - Normalizer

    @Test(
        "v2 reads 0x0 as an address and drops a number's sign; v1 does neither",
        arguments: [
            ("KERN_INVALID_ADDRESS at 0x0", "KERN_INVALID_ADDRESS at 0x0", "KERN_INVALID_ADDRESS at 0x?"),
            ("address=0x0000000000000000", "address=0x0", "address=0x?"),
            ("after the update (-3) must", "after the update (-<n>) must", "after the update (<n>) must"),
            ("index -1 beyond bounds", "index -<n> beyond bounds", "index <n> beyond bounds"),
            ("offset=-12, [-4 .. 9]", "offset=-<n>, [-<n> .. <n>]", "offset=<n>, [<n> .. <n>]"),
            ("-7 left", "-<n> left", "<n> left"),
            ("took -250ms", "took -<n>ms", "took <n>ms"),
        ])
    func normalizerAdditions(_ input: String, _ v1: String, _ v2: String) {
        #expect(Grouping.normalize(reason: input, version: .v1) == v1)
        #expect(Grouping.normalize(reason: input, version: .v2) == v2)
        #expect(Grouping.normalize(reason: v2, version: .v2) == v2)
    }

    @Test(
        "v2 keeps what names a failure: error codes, ranges, subtractions, named codes",
        arguments: [
            "Error Domain=NSURLErrorDomain Code=-1009 \"offline\"", "(OSStatus error -50.)", "pages 3-5", "x-1",
            "exit code -9", "0x8badf00d", "UTF-8", "--7",
        ])
    func normalizerKeeps(_ input: String) {
        #expect(Grouping.normalize(reason: input, version: .v2) == Grouping.normalize(reason: input, version: .v1))
    }

    // MARK: - Frame classification

    @Test(
        "frames are read in every shape the server receives",
        arguments: [
            // Apple crash logs and the SDK.
            ("4   Shop                      0x0000000100a1b2c3 -[FeedViewController reload] + 88", FrameRole.app),
            ("0   CoreFoundation            0x00000001a0b2c3d4 __exceptionPreprocess + 164", .machinery),
            ("1   libobjc.A.dylib           0x00000001a0b2c3d4 objc_exception_throw + 60", .machinery),
            ("2   Foundation                0x00000001a0b2c3d4 _userInfoForFileAndLine + 0", .machinery),
            ("3   Foundation 0x1 -[NSAssertionHandler handleFailureInMethod:object:file:lineNumber:description:] + 280", .machinery),
            ("0   libsystem_kernel.dylib    0x00000001e2d4a1b0 __pthread_kill + 8", .machinery),
            ("2   libsystem_c.dylib         0x00000001a3b4c5d6 abort + 180", .machinery),
            ("5   UIKitCore                 0x00000001a3b4c5d6 -[UITableView _endCellAnimationsWithContext:] + 1234", .system),
            ("7   libdispatch.dylib         0x00000001a3b4c5d6 _dispatch_call_block_and_release + 32", .system),
            ("3   libswiftCore.dylib        0x00000001a3b4c5d6 Swift._assertionFailure(_: Swift.StaticString) -> Swift.Never + 200", .machinery),
            ("3   libswiftCore.dylib        0x00000001a3b4c5d6 swift_dynamicCastFailure + 100", .machinery),
            ("9   Shop                      0x0000000100a1b2c3 CrashGuard.GuardRecorder.record() -> () + 12", .machinery),
            ("9   Shop                      0x0000000100a1b2c3 0x100a00000 + 12345", .app),
            ("12  ???                       0x0000000000000000 0x0 + 0", .system),
            ("1   Shop                      0x0000000100a1b2c3 Shop.Cart.total() -> Swift.Int + 16", .app),
            // Swift backtracer (Linux), LLDB, glibc.
            ("0 0x0000aaaab8e0f0d0 level3() + 16 in bt at /src/bt.swift:6:5", .app),
            (
                "1 [ra] 0x00007f0011223344 $ss17_assertionFailure_4file4line5flagss5NeverOs12StaticStringV_SSAHSus6UInt32VtF + 300 in libswiftCore.so",
                .machinery
            ),
            ("5 [ra] 0x00007f0011223344 start_thread + 100 in libc.so.6", .system),
            ("frame #1: 0x0000000100003f2c Demo`Demo.foo() -> () at main.swift:12:5", .app),
            ("frame #0: 0x00000001a0b2c3d4 libsystem_kernel.dylib`__pthread_kill + 8", .machinery),
            ("/lib/x86_64-linux-gnu/libc.so.6(abort+0x12)[0x7f8740e21bb0]", .machinery),
            ("/lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0xf3)[0x7f8740e21bb0]", .system),
            ("./shop-server(+0x3143)[0x5582aa0b1143]", .app),
            // Sentry-mapped: `function (module or file)`.
            ("get_order (shop.orders.views)", .app),
            ("_get_response (django.core.handlers.base)", .system),
            ("run (threading)", .system),
            ("renderCart (app:///static/js/cart.js)", .app),
            ("processTicksAndRejections (node:internal/process/task_queues)", .system),
            ("handle (/srv/app/node_modules/express/lib/router/layer.js)", .system),
            ("loadFeed (https://shop.example.com/static/js/main.4f3a2b.js)", .app),
            // Marks win over the image lists; the machinery is skipped whatever the mark.
            ("4   UIKitCore 0x1 -[UIView(MyShopFix) fixLayout] + 8 [app]", .app),
            ("4   Shop 0x1 -[Vendored thing] + 8 [system]", .system),
            ("0   Shop 0x1 CrashGuard.ContainerGuard.check() + 8 [app]", .machinery),
            // A symbol alone.
            ("Shop.Cart.total()", .app),
        ])
    func classify(_ frame: String, _ role: FrameRole) {
        #expect(FrameClassifier.classify(frame).role == role, "\(frame)")
    }

    @Test("a mark is not part of the frame's text")
    func markIsStripped() {
        let plain = "4   Shop 0x0000000100a1b2c3 -[FeedViewController reload] + 88"
        #expect(Grouping.normalize(frame: plain + " [app]", version: .v2) == Grouping.normalize(frame: plain, version: .v2))
        #expect(Grouping.normalize(frame: plain + "  [system] ", version: .v2) == "Shop -[FeedViewController reload]")
        #expect(Grouping.normalize(frame: " [app]", version: .v2) == "")
    }

    @Test("every FrameTable pattern is well formed and matches a name of its own shape")
    func tableCompiles() {
        for list in [FrameTable.machinerySymbols, FrameTable.machineryImages, FrameTable.systemImages, FrameTable.systemPaths] {
            for pattern in list {
                #expect(!pattern.isEmpty && pattern.filter { $0 == "*" }.count <= 2, "\(pattern)")
            }
        }
    }

    // MARK: - Frame selection

    static func darwin(_ frames: [(String, String)]) -> [String] {
        frames.enumerated().map {
            "\($0.offset)   \($0.element.0)   0x00000001\(String($0.offset * 4099 + 0x1000, radix: 16)) \($0.element.1) + \($0.offset * 7)"
        }
    }

    @Test("the first three app frames past the machinery and the system")
    func selectsAppFrames() {
        let stack = Self.darwin([
            ("CoreFoundation", "__exceptionPreprocess"), ("libobjc.A.dylib", "objc_exception_throw"),
            ("Foundation", "_userInfoForFileAndLine"), ("UIKitCore", "-[UITableView endUpdates]"),
            ("Shop", "-[A a]"), ("UIKitCore", "-[UIView layoutSubviews]"), ("Shop", "-[B b]"), ("Shop", "-[C c]"),
            ("Shop", "-[D d]"), ("Shop", "main"),
        ])
        #expect(Grouping.signatureFrames(stack).map(\.index) == [4, 6, 7])
    }

    @Test("without an app frame: the first three frames that are not machinery")
    func fallsBackToSystemFrames() {
        let stack = Self.darwin([
            ("libsystem_kernel.dylib", "__pthread_kill"), ("libsystem_pthread.dylib", "pthread_kill"),
            ("libsystem_c.dylib", "abort"), ("libdispatch.dylib", "_dispatch_assert_queue_fail"),
            ("CoreData", "-[NSManagedObjectContext save:]"), ("CoreFoundation", "__CFRunLoopRun"),
            ("GraphicsServices", "GSEventRunModal"), ("UIKitCore", "UIApplicationMain"),
        ])
        #expect(Grouping.signatureFrames(stack).map(\.index) == [4, 5, 6])
        #expect(Grouping.signatureFrames(Array(stack.prefix(3))).isEmpty)
        #expect(Grouping.signatureFrames([]).isEmpty)
    }

    // MARK: - Signature

    @Test("the v2 scheme: v2, kind, reason, the v2 normalized reason and the selected normalized frames")
    func referenceScheme() {
        let stack = [
            "0   libsystem_kernel.dylib 0x00000001e2d4a1b0 __pthread_kill + 8",
            "1   Shop 0x0000000100a1b2c3 Shop.Cart.total() -> Swift.Int + 16",
            "2   Shop 0x0000000100a1b2c3 Shop.CartView.body.getter + 40 [app]",
        ]
        let s = Grouping.signature(kind: .container, reason: "index -1 at 0x0", stack: stack, fingerprint: nil, version: .v2)
        #expect(s.version == .v2)
        #expect(s.normalizedReason == "index <n> at 0x?")
        #expect(
            s.hash
                == SignatureTests.referenceHash([
                    "v2", "container", "reason", "index <n> at 0x?", "Shop Shop.Cart.total() -> Swift.Int",
                    "Shop Shop.CartView.body.getter",
                ]))
        let f = Grouping.signature(kind: .container, reason: "x", stack: stack, fingerprint: ["a", "b"], version: .v2)
        #expect(f.hash == SignatureTests.referenceHash(["v2", "container", "fingerprint", "a", "b"]))
    }

    @Test("a version never shares a signature with another: the version is hashed first")
    func versionsNeverCollide() {
        for kind in ReportKind.allCases {
            for fingerprint in [nil, ["checkout"]] {
                let v1 = Grouping.signature(kind: kind, reason: "boom", stack: nil, fingerprint: fingerprint, version: .v1)
                let v2 = Grouping.signature(kind: kind, reason: "boom", stack: nil, fingerprint: fingerprint, version: .v2)
                #expect(v1.hash != v2.hash)
                #expect(v1.normalizedReason == v2.normalizedReason)
            }
        }
    }

    @Test("v2 counts app frames for every kind with a stack; v1 only for signal and exception")
    func framesForEveryKind() {
        let a = Self.darwin([("Shop", "-[Feed load]"), ("Shop", "-[Feed reload]")])
        let b = Self.darwin([("Shop", "-[Cart total]"), ("Shop", "-[Cart reload]")])
        for kind in ReportKind.allCases {
            let v2a = Grouping.signature(kind: kind, reason: "r", stack: a, fingerprint: nil, version: .v2).hash
            let v2b = Grouping.signature(kind: kind, reason: "r", stack: b, fingerprint: nil, version: .v2).hash
            #expect(v2a != v2b, "\(kind)")
            let v1a = Grouping.signature(kind: kind, reason: "r", stack: a, fingerprint: nil, version: .v1).hash
            let v1b = Grouping.signature(kind: kind, reason: "r", stack: b, fingerprint: nil, version: .v1).hash
            #expect((v1a != v1b) == (kind == .signal || kind == .exception), "\(kind)")
        }
    }

    @Test("frame addresses, offsets, indices, the stack's depth and its marks never split a v2 group")
    func occurrenceVariation() {
        func occurrence(_ seed: Int, depth: Int) -> [String] {
            var frames: [(String, String)] = [
                ("CoreFoundation", "__exceptionPreprocess"), ("libobjc.A.dylib", "objc_exception_throw"),
                ("Shop", "-[Feed load]"), ("Shop", "-[Feed reload]"), ("Shop", "-[Feed viewDidLoad]"),
            ]
            for k in 0..<depth { frames.append(k % 2 == 0 ? ("UIKitCore", "-[UIView layoutSubviews]") : ("Shop", "caller\(seed + k)")) }
            return frames.enumerated().map {
                "\($0.offset)   \($0.element.0)   0x0000000\(seed * 7919 + $0.offset) \($0.element.1) + \(seed + $0.offset)"
                    + (seed % 2 == 0 ? "" : ($0.element.0 == "Shop" ? " [app]" : " [system]"))
            }
        }
        let hashes = Set(
            (0..<20).map {
                Grouping.signature(
                    kind: .exception, reason: "index \($0 - 10) at 0x\(String($0 * 977, radix: 16))", stack: occurrence($0, depth: 15 + $0),
                    fingerprint: nil, version: .v2
                ).hash
            })
        #expect(hashes.count == 1)
    }
}
