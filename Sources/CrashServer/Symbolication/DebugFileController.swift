import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// `POST /v1/projects/{project}/debug-files?name=<file name>`: the body is one ELF file
/// (`application/octet-stream`), stored by its GNU build id. Behind the project's read
/// token, the secret credential (the ingest key ships inside apps; anyone holding it must
/// not be able to change what a project's stacks say). 201 for a new build id, 200 for a
/// re-upload (`outcome` says whether it replaced a poorer file), 400 for a file that is
/// not ELF or has no build id, 413 over `CRASHGUARD_MAX_DEBUG_FILE_BYTES`.
struct DebugFileController: Sendable {
    let database: CrashDatabase
    let maxBytes: Int

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.group("/v1/projects/:project").add(middleware: ReadAuthenticationMiddleware(store: database))
            .post("debug-files", use: upload)
    }

    @Sendable func upload(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireReadProject()
        let name = request.uri.queryParameters.get("name") ?? "unnamed"
        guard !name.isEmpty, name.utf8.count <= 255, !name.contains("/"), !name.unicodeScalars.contains(where: { $0.value < 0x20 })
        else { throw APIError.badRequest("name: a file name of 1 to 255 bytes, without '/' or control characters") }
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > maxBytes {
            throw APIError.payloadTooLarge("debug file over \(maxBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
        }
        let body = request.body
        let contents: ByteBuffer
        do {
            contents = try await body.collect(upTo: maxBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError.payloadTooLarge("debug file over \(maxBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
        }
        let upload: DebugFileUpload
        do {
            upload = try await database.storeDebugFile(project: project.id, name: name, contents: contents)
        } catch let error as ELFDebugFile.Error {
            throw APIError.badRequest("\(error)")
        }
        let data = try JSONEncoder.crashWire().encode(upload)
        return Response(
            status: upload.outcome == "created" ? .created : .ok,
            headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
