import CrashCompression
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Sentry's chunk-upload protocol, so that `sentry-cli debug-files upload` stores Mach-O and
/// dSYM files unchanged (apple.md, "`sentry-cli` works unchanged"): the options, the
/// chunk uploads and `difs/assemble`, behind the project's read token as `Bearer` (any org
/// slug: the token names the project), or an API token with `debug-files:write`
/// (accounts.md). The chunk routes name no project, so an API token's chunks go to its only
/// project when it is limited to one, else to the project the org slug names
/// (`sentry-cli --org <project>`).
///
/// Bounded like the REST upload: a chunk request is read whole up to `maxRequestSize`,
/// counted in the ``BodyByteBudget`` under the project; each chunk at most `chunkSize` once
/// inflated, its SHA-1 checked; the project's pending chunks within its debug-file byte
/// quota; an assembled file within `CRASHGUARD_MAX_DEBUG_FILE_BYTES`, checked against the
/// SHA-1 it is named by, then stored by ``DebugFileIntake`` like an upload. Assembling is
/// synchronous, so an assemble answers `ok` (or `error`) as soon as its chunks are there.
struct ChunkUploadController<Files: DebugFileStore, Chunks: ChunkUploadStore, Projects: ReadTokenLookup>: Sendable {
    let files: Files
    let chunks: Chunks
    let projects: Projects
    let maxBytes: Int
    let quota: DebugFileQuota
    let budget: BodyByteBudget
    let spoolDirectory: URL

    static var chunkSize: Int { 8 << 20 }
    static var chunksPerRequest: Int { 64 }
    static var maxRequestSize: Int { 32 << 20 }

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.get("/api/0/organizations/:org/chunk-upload/", use: options)
        router.post("/api/0/organizations/:org/chunk-upload/", use: upload)
        router.group("/api/0/projects/:org/:project").add(middleware: ReadAuthenticationMiddleware(store: projects))
            .post("files/difs/assemble/", use: assemble)
    }

    /// The project of the request's read token or API token, for the routes that name no project.
    private func project(_ request: Request, _ context: CrashRequestContext) async throws -> ProjectRef {
        if let secret = ReadAuthenticationMiddleware<Projects>.bearer(request), APITokenSecret.isToken(secret) {
            return try await tokenProject(secret, request, context)
        }
        guard let header = request.headers[.authorization] else {
            throw APIError.unauthorized("missing Authorization: Bearer <read token>")
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw APIError.unauthorized("Authorization must be: Bearer <read token>")
        }
        guard let project = try await projects.project(readToken: String(parts[1]).trimmingWhitespace()) else {
            throw APIError.unauthorized("unknown read token")
        }
        return project
    }

    /// The project an API token uploads chunks to: its only project, or the one named by the
    /// org slug; its scope checked within its user's role as on every route.
    private func tokenProject(_ secret: String, _ request: Request, _ context: CrashRequestContext) async throws -> ProjectRef {
        let found: (APIToken, User)?
        do {
            found = try await projects.apiToken(secret: secret)
        } catch  where isConnectionError(error) {
            throw APIError.databaseUnreachable
        }
        guard let (token, user) = found else { throw APIError.unauthorized("unknown, expired or revoked API token") }
        let org = context.parameters.get("org") ?? ""
        let slug = token.projects.flatMap { $0.count == 1 ? $0[0] : nil } ?? org
        do {
            return try await ScopeCheck.project(
                token: token, user: user, slug: slug, method: request.method, path: context.endpointPath, lookup: projects)
        } catch let error as APIError where error.status == .notFound && slug == org {
            throw APIError.notFound(
                "org: no project '\(org)' for this token; the chunk upload takes its project from --org, or from a token limited to one project")
        }
    }

    @Sendable func options(request: Request, context: CrashRequestContext) async throws -> Response {
        _ = try await project(request, context)
        let org = context.parameters.get("org") ?? "0"
        let body: [String: Any] = [
            "url": "/api/0/organizations/\(org)/chunk-upload/", "chunkSize": Self.chunkSize,
            "chunksPerRequest": Self.chunksPerRequest, "maxRequestSize": Self.maxRequestSize, "maxFileSize": maxBytes,
            "concurrency": 4, "hashAlgorithm": "sha1", "compression": ["gzip"], "accept": ["debug_files"],
        ]
        return try json(.ok, body)
    }

    @Sendable func upload(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try await project(request, context)
        guard let type = request.headers[.contentType], let boundary = Multipart.boundary(type) else {
            throw APIError.badRequest("Content-Type: multipart/form-data with a boundary")
        }
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > Self.maxRequestSize { throw tooLarge }
        let share = BodyByteBudget.Reservation(budget, project: project.id)
        defer { share.release() }
        var body = ByteBuffer()
        for try await piece in request.body {
            guard body.readableBytes + piece.readableBytes <= Self.maxRequestSize else { throw tooLarge }
            try share.grow(to: body.readableBytes + piece.readableBytes)
            body.writeImmutableBuffer(piece)
        }
        let parts = try Multipart.parts(Array(body.readableBytesView), boundary: boundary)
        guard parts.count <= Self.chunksPerRequest else {
            throw APIError.badRequest("file: more than \(Self.chunksPerRequest) chunks in one request")
        }
        var received: [(sha1: String, data: ByteBuffer)] = []
        for part in parts where part.name == "file" || part.name == "file_gzip" {
            var bytes = part.body
            if part.name == "file_gzip" {
                do {
                    bytes = try Inflater.inflate(part.body, format: .gzip, maxOutputBytes: Self.chunkSize)
                } catch {
                    throw APIError.badRequest("file_gzip: \(error) (a chunk inflates to at most \(Self.chunkSize) bytes)")
                }
            }
            guard bytes.count <= Self.chunkSize else { throw APIError.badRequest("file: a chunk over \(Self.chunkSize) bytes") }
            let digest = Insecure.SHA1.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
            guard digest == part.filename?.lowercased() else {
                throw APIError.badRequest("file: the chunk's SHA-1 is \(digest), not its file name \(part.filename ?? "")")
            }
            received.append((digest, ByteBuffer(bytes: bytes)))
        }
        do {
            try await chunks.save(project: project.id, chunks: received, maxBytes: quota.maxBytes)
        } catch let error as DebugFileQuotaError {
            throw APIError.payloadTooLarge("\(error)")
        }
        return try json(.ok, [String: Any]())
    }

    /// One file of an assemble request.
    private struct Wanted: Decodable {
        var name: String
        var debug_id: String?
        var chunks: [String]
    }

    @Sendable func assemble(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireReadProject()
        let body = try await request.body.collect(upTo: 1 << 20)
        let wanted: [String: Wanted]
        do {
            wanted = try JSONDecoder().decode([String: Wanted].self, from: Data(body.readableBytesView))
        } catch {
            throw APIError.badRequest("body: an object of {\"name\", \"debug_id\", \"chunks\"} by SHA-1")
        }
        guard wanted.count <= 1024 else { throw APIError.badRequest("body: more than 1024 files") }
        let maxChunks = maxBytes / Self.chunkSize + 1
        var answer: [String: Any] = [:]
        for (checksum, file) in wanted {
            guard Self.isSHA1(checksum), file.chunks.allSatisfy(Self.isSHA1) else {
                throw APIError.badRequest("chunks: SHA-1 digests in lower-case hex")
            }
            guard file.chunks.count <= maxChunks else {
                answer[checksum] = Self.state("error", detail: "the file is over \(maxBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
                continue
            }
            answer[checksum] = try await assemble(project: project.id, checksum: checksum, file: file)
        }
        return try json(.ok, answer)
    }

    private func assemble(project: Int64, checksum: String, file: Wanted) async throws -> [String: Any] {
        if let stored = try await files.file(project: project, sha1: checksum) {
            return Self.ok(stored, sha1: checksum)
        }
        if let key = try await chunks.assembled(project: project, sha1: checksum),
            let stored = try await files.files(project: project, buildIDs: [key]).first
        {
            return Self.ok(stored.info, sha1: checksum)
        }
        let missing = try await chunks.missing(project: project, among: file.chunks)
        guard missing.isEmpty else {
            return ["state": "not_found", "missingChunks": missing]
        }
        guard !file.chunks.isEmpty else { return Self.state("error", detail: "no chunks") }
        let spool = try DebugFileSpool(in: spoolDirectory)
        for sha1 in file.chunks {
            guard let data = try await chunks.chunk(project: project, sha1: sha1) else {
                return ["state": "not_found", "missingChunks": [sha1]]
            }
            guard spool.size + data.readableBytes <= maxBytes else {
                return Self.state("error", detail: "the file is over \(maxBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
            }
            try await spool.append(data)
        }
        guard spool.sha1 == checksum else {
            return Self.state("error", detail: "the chunks' SHA-1 is \(spool.sha1), not \(checksum)")
        }
        let name = String(file.name.split(separator: "/").last ?? "unnamed").prefix(255)
        let upload: DebugFileUpload
        do {
            upload = try await DebugFileIntake(store: files, maxBytes: maxBytes, spoolDirectory: spoolDirectory)
                .store(project: project, name: String(name), spool: spool, quota: quota)
        } catch let error as DebugFileIntakeError {
            return Self.state("error", detail: "\(error)")
        } catch let error as DebugFileQuotaError {
            return Self.state("error", detail: "\(error)")
        }
        let wantedID = file.debug_id?.lowercased()
        let entry = upload.files.first { $0.info.buildId == wantedID } ?? upload.file
        try await chunks.remember(project: project, sha1: checksum, key: entry.info.buildId)
        try await chunks.delete(project: project, sha1s: file.chunks)
        return Self.ok(entry.info, sha1: checksum)
    }

    private static func ok(_ info: DebugFileInfo, sha1: String) -> [String: Any] {
        var features = ["symtab"]
        if !info.hasSymbols { features = [] }
        if info.hasDebugInfo { features.append("debug") }
        let dif: [String: Any] = [
            "id": "\(info.buildId)-\(info.arch ?? info.kind)", "uuid": info.buildId, "debugId": info.buildId,
            "objectName": info.name, "cpuName": info.arch ?? "unknown", "sha1": sha1,
            "symbolType": info.kind == "macho" ? "macho" : "elf", "size": info.size,
            "dateCreated": ISO8601DateFormatter().string(from: info.uploadedAt), "data": ["features": features],
        ]
        return ["state": "ok", "missingChunks": [String](), "detail": NSNull(), "dif": dif]
    }

    private static func state(_ state: String, detail: String) -> [String: Any] {
        ["state": state, "detail": detail, "missingChunks": [String]()]
    }

    private static func isSHA1(_ text: String) -> Bool {
        text.utf8.count == 40 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }

    private func json(_ status: HTTPResponse.Status, _ object: Any) throws -> Response {
        JSONResponse.response(status, ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])))
    }

    private var tooLarge: APIError {
        APIError.payloadTooLarge("a chunk request over \(Self.maxRequestSize) bytes")
    }
}

/// Just enough `multipart/form-data` (RFC 7578) for chunk uploads: each part's name, file
/// name and bytes, from a body already read within its limit.
enum Multipart {
    struct Part {
        var name: String?
        var filename: String?
        var body: [UInt8]
    }

    /// The boundary parameter of a `multipart/form-data` content type.
    static func boundary(_ contentType: String) -> String? {
        let pieces = contentType.split(separator: ";").map { $0.trimmingWhitespace() }
        guard pieces.first?.lowercased() == "multipart/form-data" else { return nil }
        for piece in pieces.dropFirst() where piece.lowercased().hasPrefix("boundary=") {
            var value = piece.dropFirst("boundary=".count)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = value.dropFirst().dropLast() }
            return value.isEmpty || value.count > 200 ? nil : String(value)
        }
        return nil
    }

    static func parts(_ body: [UInt8], boundary: String) throws -> [Part] {
        let delimiter = Array("--\(boundary)".utf8)
        let separator = Array("\r\n--\(boundary)".utf8)
        guard let first = find(delimiter, in: body, from: 0) else { throw APIError.badRequest("file: no multipart boundary in the body") }
        var at = first + delimiter.count
        var parts: [Part] = []
        while true {
            // "--" ends the body; else CRLF, the part's headers, a blank line, its bytes.
            if body.count >= at + 2, body[at] == 45, body[at + 1] == 45 { return parts }
            guard body.count >= at + 2, body[at] == 13, body[at + 1] == 10 else { throw malformed }
            at += 2
            guard let headersEnd = find([13, 10, 13, 10], in: body, from: at) else { throw malformed }
            let headers = String(decoding: body[at..<headersEnd], as: UTF8.self)
            guard let end = find(separator, in: body, from: headersEnd + 4) else { throw malformed }
            var part = Part(name: nil, filename: nil, body: Array(body[(headersEnd + 4)..<end]))
            for line in headers.split(separator: "\r\n") where line.lowercased().hasPrefix("content-disposition:") {
                part.name = parameter("name", in: line)
                part.filename = parameter("filename", in: line)
            }
            parts.append(part)
            guard parts.count <= 1024 else { throw APIError.badRequest("file: too many multipart parts") }
            at = end + separator.count
        }
    }

    private static var malformed: APIError { APIError.badRequest("file: a malformed multipart body") }

    private static func parameter(_ key: String, in line: Substring) -> String? {
        for piece in line.split(separator: ";").dropFirst() {
            let trimmed = piece.trimmingWhitespace()
            guard trimmed.hasPrefix("\(key)=") else { continue }
            var value = trimmed.dropFirst(key.count + 1)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = value.dropFirst().dropLast() }
            return String(value)
        }
        return nil
    }

    /// The first index of `needle` in `haystack` at or after `start`.
    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        var i = start
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == needle[0], haystack[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }
}
