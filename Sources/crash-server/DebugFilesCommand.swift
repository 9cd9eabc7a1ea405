import ArgumentParser
import CrashServer
import Foundation

/// `crash-server debug-files upload PROJECT FILE...`: stores ELF debug files for server-side
/// symbolication (docs/symbolication.md), straight into the database like the `project`
/// commands, with the same header checks and per-project quota as an upload (each file is
/// copied to a temporary file and stored from it in chunks). The REST form is `POST /v1/projects/{project}/debug-files`.
struct DebugFilesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "debug-files",
        abstract: "Upload debug files (ELF with a GNU build id) for server-side symbolication.",
        subcommands: [Upload.self]
    )

    struct Upload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store ELF files by build id; prints one JSON line per file. A re-upload is harmless.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "Project slug.") var project: String
        @Argument(help: "ELF files: binaries or their separate debug files (objcopy --only-keep-debug).")
        var files: [String]

        func validate() throws {
            guard !files.isEmpty else { throw ValidationError("give at least one file") }
        }

        func run() async throws {
            let config = try common.configuration()
            let project = self.project
            let files = self.files
            let failures = try await withDatabase(config, logger: makeLogger(config)) { db -> Int in
                try await PostgresSchemaMaintenance(database: db).migrate()
                var failures = 0
                for path in files {
                    let url = URL(fileURLWithPath: path)
                    do {
                        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
                        guard size <= config.maxDebugFileBytes else {
                            throw ValidationError("over \(config.maxDebugFileBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
                        }
                        let upload = try await PostgresDebugFileStore(database: db).store(
                            projectSlug: project, name: url.lastPathComponent, path: path,
                            quota: DebugFileQuota(maxCount: config.debugFilesMaxCount, maxBytes: config.debugFilesMaxBytes),
                            spoolDirectory: FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-uploads"))
                        let json = try JSONEncoder.debugFiles.encode(upload)
                        print(String(decoding: json, as: UTF8.self))
                    } catch {
                        FileHandle.standardError.write(Data("\(path): \(error)\n".utf8))
                        failures += 1
                    }
                }
                return failures
            }
            if failures > 0 { throw ExitCode.failure }
        }
    }
}

extension JSONEncoder {
    fileprivate static var debugFiles: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}
