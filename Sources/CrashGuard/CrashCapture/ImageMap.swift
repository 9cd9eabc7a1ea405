import CCrashCapture
import Foundation

/// One image (executable or shared library) mapped into a process.
struct LoadedImage: Codable, Hashable, Sendable {
    /// File path as the loader knows it.
    var path: String
    /// Lowest mapped address.
    var base: UInt64
    /// Bytes from `base` to the end of the last segment.
    var size: UInt64
    /// GNU build id or Mach-O UUID, lowercase hex; empty when the image has none.
    var buildID: String

    var name: String { path.split(separator: "/").last.map(String.init) ?? path }

    func contains(_ address: UInt64) -> Bool { address >= base && address - base < size }

    /// Every image loaded in this process now.
    static func current() -> [LoadedImage] {
        let box = Box()
        withExtendedLifetime(box) {
            ccrash_each_image(Unmanaged.passUnretained(box).toOpaque()) { context, path, base, size, id, idLength in
                guard let context else { return }
                let box = Unmanaged<Box>.fromOpaque(context).takeUnretainedValue()
                var buildID = ""
                if let id {
                    for i in 0..<idLength {
                        let byte = id[i]
                        buildID += String(byte >> 4, radix: 16) + String(byte & 0xf, radix: 16)
                    }
                }
                box.images.append(
                    LoadedImage(
                        path: path.map { String(cString: $0) } ?? "",
                        base: UInt64(base),
                        size: UInt64(size),
                        buildID: buildID
                    ))
            }
        }
        return box.images
    }

    private final class Box {
        var images: [LoadedImage] = []
    }
}

/// Symbolicates a dead process's frames in this process: each address is turned into an
/// offset in the image that held it (from the crashed run's image map), then, if the same
/// image (same path and build id) is loaded here, looked up in its ELF symbol table (Linux)
/// or with `dladdr`, and demangled with the Swift runtime's `swift_demangle`.
struct Symbolicator {
    /// The crashed process's images.
    var crashed: [LoadedImage]
    /// This process's images.
    var current: [LoadedImage]

    /// What one address resolved to.
    struct Resolved: Sendable {
        /// The image's file name, or `nil` when no crashed image held the address.
        var image: String?
        /// The function, demangled, when a symbol table named it.
        var symbol: String?
        /// Bytes into `symbol`, or into the image when there is no symbol.
        var offset: UInt64
    }

    /// `"<index> <image> 0x<address> <symbol> + <offset>"`, the shape of an Apple crash log
    /// line (which the contract's normalizer expects); the image name and image offset stand
    /// in for the symbol when it cannot be found.
    func frame(_ index: Int, address: UInt64) -> String {
        let hex = "0x" + String(address, radix: 16)
        let resolved = resolve(address, isReturnAddress: index > 0)
        guard let image = resolved.image else { return "\(index) ??? \(hex)" }
        return "\(index) \(image) \(hex) \(resolved.symbol ?? image) + \(resolved.offset)"
    }

    /// The image and function holding `address`. A return address points after its call,
    /// so the call itself (`address - 1`) is looked up.
    func resolve(_ address: UInt64, isReturnAddress: Bool) -> Resolved {
        guard let image = crashed.first(where: { $0.contains(address) }) else {
            return Resolved(image: nil, symbol: nil, offset: 0)
        }
        let offset = address - image.base
        let lookupOffset = isReturnAddress && offset > 0 ? offset - 1 : offset
        let here = current.first(where: { $0.path == image.path && $0.buildID == image.buildID })
        // The same file: loaded here, or still on disk with the same build id (the app that
        // crashed, read by another process or the same build after a restart).
        if here != nil || (!image.buildID.isEmpty && Self.buildID(ofFile: image.path) == image.buildID) {
            if let symbol = Self.fileSymbol(path: image.path, offset: lookupOffset) {
                return Resolved(image: image.name, symbol: symbol.name, offset: symbol.offset + (offset - lookupOffset))
            }
        }
        if let here, let symbol = Self.symbol(at: here.base + lookupOffset) {
            return Resolved(image: image.name, symbol: symbol.name, offset: (here.base + offset) &- symbol.address)
        }
        return Resolved(image: image.name, symbol: nil, offset: offset)
    }

    /// The GNU build id of the ELF file at `path`, lowercase hex (`nil` when none).
    static func buildID(ofFile path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 64)
        let length = ccrash_elf_build_id(path, &buffer, buffer.count)
        guard length > 0 else { return nil }
        return buffer.prefix(length).map { String($0 >> 4, radix: 16) + String($0 & 0xf, radix: 16) }.joined()
    }

    /// The function containing `offset` in the image file's own symbol table (ELF
    /// `.symtab`: local functions too, which `dladdr` cannot see), demangled.
    static func fileSymbol(path: String, offset: UInt64) -> (name: String, offset: UInt64)? {
        var buffer = [CChar](repeating: 0, count: 4096)
        var symbolOffset: UInt64 = 0
        guard ccrash_elf_symbol(path, offset, &buffer, buffer.count, &symbolOffset) != 0 else { return nil }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return (demangle(name), symbolOffset)
    }

    /// The nearest dynamic symbol at or below `address` in this process, demangled.
    static func symbol(at address: UInt64) -> (name: String, address: UInt64)? {
        var name: UnsafePointer<CChar>?
        var symbolAddress: UInt = 0
        var image: UnsafePointer<CChar>?
        var imageBase: UInt = 0
        guard ccrash_dladdr(UInt(address), &name, &symbolAddress, &image, &imageBase) != 0, let name, symbolAddress != 0
        else { return nil }
        return (demangle(String(cString: name)), UInt64(symbolAddress))
    }

    /// `swift_demangle`'s readable name (or the C++ one for `_Z…`), or the input when it is
    /// neither.
    static func demangle(_ mangled: String) -> String {
        var buffer = [CChar](repeating: 0, count: 2048)
        var length = ccrash_demangle(mangled, &buffer, buffer.count)
        if length == 0 { length = ccrash_demangle_cxx(mangled, &buffer, buffer.count) }
        guard length > 0 else { return mangled }
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
