import CCrashCapture
import Foundation

/// The stack of a report made in a running process (guard catches, custom reports, errors
/// escaping `run { }`): raw return addresses, formatted and accompanied by their images the
/// way a crash record's are, so the server symbolicates both alike (docs/symbolication.md).
///
/// Capturing is one `backtrace()` into a fixed buffer; the image list is cached and read
/// again only when an image was loaded or unloaded since (``ccrash_image_generation``).
/// Names come from `dladdr` (the dynamic symbol table, already in memory; no file is read):
/// each frame is `"<i> <image> 0x<address> <symbol or image> + <offset>"`, and
/// `context["image.N"]` = `0x<base> <size> <build id> <path>` for the images the frames
/// fall in.
enum GuardStack {
    /// Frames and the context entries that go with them.
    struct Captured: Sendable {
        var frames: [String]
        /// `image.N` entries, and `crash.machineryFrames` (frames above frame 0 left out).
        var context: [String: String]
    }

    /// Most frames captured.
    static let maxFrames = 128
    /// Most `image.N` entries.
    static let maxImages = 16

    /// The calling thread's stack below the caller of the function that calls this one
    /// (`skipping` more frames): both are the recorder's. `nil` when `backtrace()` found
    /// nothing (callers then fall back to `Thread.callStackSymbols`).
    @inline(never)
    static func capture(skipping: Int = 0) -> Captured? {
        let buffer = UnsafeMutablePointer<UInt>.allocate(capacity: maxFrames + 2 + skipping)
        defer { buffer.deallocate() }
        let count = Int(ccrash_backtrace(buffer, Int32(maxFrames + 2 + skipping)))
        // buffer[0] is in this function, buffer[1] in its caller.
        let drop = 2 + skipping
        guard count > drop else { return nil }
        let addresses = (drop..<count).map { UInt64(buffer[$0]) }
        return format(addresses, skipped: drop)
    }

    /// The stack below the caller of the function that calls this one (`skipping` more
    /// frames), with its `image.N` entries added to `context` (the caller's entries win);
    /// `Thread.callStackSymbols` (through `fallback`) when `backtrace()` found nothing.
    @inline(never)
    static func frames(
        into context: inout [String: String], skipping: Int = 0, fallback: () -> [String] = { Thread.callStackSymbols }
    ) -> [String] {
        guard let captured = capture(skipping: skipping + 1) else { return Limits.stack(fallback()) }
        context.merge(captured.context) { mine, _ in mine }
        return captured.frames
    }

    /// Formats return addresses (innermost first) with this process's images.
    static func format(_ addresses: [UInt64], skipped: Int) -> Captured {
        let images = ImageCache.shared.images()
        var used: [LoadedImage] = []
        var frames: [String] = []
        frames.reserveCapacity(addresses.count)
        for (i, address) in addresses.enumerated() {
            let hex = "0x" + String(address, radix: 16)
            guard let image = images.first(where: { $0.contains(address) }) else {
                frames.append("\(i) ??? \(hex)")
                continue
            }
            if !used.contains(image) { used.append(image) }
            // A return address: the call is the byte before it.
            if let symbol = Symbolicator.symbol(at: address &- 1), symbol.address <= address {
                frames.append("\(i) \(image.name) \(hex) \(symbol.name) + \(address - symbol.address)")
            } else {
                frames.append("\(i) \(image.name) \(hex) \(image.name) + \(address - image.base)")
            }
        }
        var context: [String: String] = [:]
        for (i, image) in used.prefix(maxImages).enumerated() {
            context["image.\(i)"] =
                "0x\(String(image.base, radix: 16)) \(image.size) \(image.buildID.isEmpty ? "-" : image.buildID) \(image.path)"
        }
        context["crash.machineryFrames"] = String(skipped)
        return Captured(frames: frames, context: context)
    }
}

/// This process's images, read again only after an image was loaded or unloaded (`dlopen`,
/// `dlclose`); the crash handler's executable ranges and the crash session's image map are
/// refreshed with it.
final class ImageCache: @unchecked Sendable {
    static let shared = ImageCache()

    private let lock = NSLock()
    private var generation: UInt64 = .max
    private var cached: [LoadedImage] = []

    func images() -> [LoadedImage] {
        let now = ccrash_image_generation()
        lock.lock()
        defer { lock.unlock() }
        if now != generation || cached.isEmpty {
            cached = LoadedImage.current()
            generation = now
            ccrash_refresh_images()
            CrashCapture.imagesChanged(cached)
        }
        return cached
    }
}
