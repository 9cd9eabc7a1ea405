import Foundation
import Testing

@testable import CrashGuard

#if os(Linux)
/// The image map reads program headers the same way for a loaded image and for its file
/// (one walk in image_map.c): a file's build id is the one the loader's copy carries, and the
/// file's lowest load address anchors `.symtab` lookups.
@Suite struct ImageMapTests {
    @Test func fileBuildIDsMatchTheLoadedImages() {
        let images = LoadedImage.current().filter { !$0.buildID.isEmpty && FileManager.default.isReadableFile(atPath: $0.path) }
        #expect(!images.isEmpty)
        for image in images {
            #expect(Symbolicator.buildID(ofFile: image.path) == image.buildID, "\(image.path)")
        }
    }

    @Test func notELFOrMissingFilesHaveNoBuildIDOrSymbol() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("not-elf-\(UUID().uuidString)").path
        try Data(repeating: 0x7f, count: 4096).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(Symbolicator.buildID(ofFile: path) == nil)
        #expect(Symbolicator.fileSymbol(path: path, offset: 0) == nil)
        #expect(Symbolicator.buildID(ofFile: path + ".missing") == nil)
    }
}
#endif
