import CrashDebugFiles
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// `POST /v1/projects/{project}/debug-files?name=<file name>`: the body is one ELF file, Mach-O
/// file (thin or fat) or zipped dSYM (`application/octet-stream`), stored as the debug files
/// it holds (``DebugFileIntake``): ELF by GNU build id, Mach-O by `LC_UUID` per architecture. Behind the project's read
/// token, the secret credential (the ingest key ships inside apps; anyone holding it must
/// not be able to change what a project's stacks say), checked before any body byte is read.
/// 201 when a key is new, 200 when all were known (`outcome` says whether one replaced a
/// poorer file), 400 for a file that is none of those, has no build id or UUID or whose headers
/// cannot be read in bounded work (``ELFDebugFile``, ``MachODebugFile``, ``ZipDirectory``), 413 over `CRASHGUARD_MAX_DEBUG_FILE_BYTES` or the
/// project's quota (``DebugFileQuota``).
///
/// The body is streamed to a file in `spoolDirectory` as it arrives: what is in memory at
/// once (the chunks received and not yet written) is counted in the server's
/// ``BodyByteBudget`` under the project (503 past its share) and given back as it reaches the
/// disk. The headers are parsed from that file on NIO's blocking thread pool.
struct DebugFileController<Store: DebugFileStore, Projects: ReadTokenLookup>: Sendable {
    let store: Store
    /// Resolves the read token (``ReadAuthenticationMiddleware``).
    let projects: Projects
    let maxBytes: Int
    let quota: DebugFileQuota
    let budget: BodyByteBudget
    let spoolDirectory: URL

    /// Received bytes are written to the file once this many are in memory (or the body ends).
    static var writeBytes: Int { 1 << 20 }

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.group("/v1/projects/:project").add(middleware: ReadAuthenticationMiddleware(store: projects))
            .post("debug-files", use: upload)
    }

    @Sendable func upload(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireReadProject()
        let name = request.uri.queryParameters.get("name") ?? "unnamed"
        guard !name.isEmpty, name.utf8.count <= 255, !name.contains("/"), !name.unicodeScalars.contains(where: { $0.value < 0x20 })
        else { throw APIError.badRequest("name: a file name of 1 to 255 bytes, without '/' or control characters") }
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > maxBytes {
            throw tooLarge
        }
        let spool = try DebugFileSpool(in: spoolDirectory)
        let share = BodyByteBudget.Reservation(budget, project: project.id)
        var pending = ByteBuffer()
        for try await chunk in request.body {
            guard spool.size + pending.readableBytes + chunk.readableBytes <= maxBytes else { throw tooLarge }
            try share.grow(to: pending.readableBytes + chunk.readableBytes)
            pending.writeImmutableBuffer(chunk)
            if pending.readableBytes >= Self.writeBytes {
                try await spool.append(pending)
                pending = ByteBuffer()
                share.release()
            }
        }
        if pending.readableBytes > 0 { try await spool.append(pending) }
        pending = ByteBuffer()
        share.release()
        let upload: DebugFileUpload
        do {
            upload = try await DebugFileIntake(store: store, maxBytes: maxBytes, spoolDirectory: spoolDirectory)
                .store(project: project.id, name: name, spool: spool, quota: quota)
        } catch let error as DebugFileIntakeError {
            throw APIError.badRequest("\(error)")
        } catch let error as DebugFileQuotaError {
            throw APIError.payloadTooLarge("\(error)")
        }
        let data = try JSONEncoder.crashWire().encode(upload)
        return JSONResponse.response(upload.outcome == "created" ? .created : .ok, ByteBuffer(bytes: data))
    }

    private var tooLarge: APIError {
        APIError.payloadTooLarge("debug file over \(maxBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
    }
}
