import Foundation
import Hummingbird
import NIOCore

/// The triage routes of triage.md behind the project's read token: `PATCH` of one group or of
/// every group a list matches, merge and unmerge, the activity timeline and comments. Thin: each handler parses
/// its request (400s naming the field) and asks ``TriageService``; the acting party is the
/// request's ``CrashRequestContext/principal``.
struct TriageController<Store: TriageStore, Queries: QueryStore>: Sendable {
    let triage: TriageService<Store, Queries>

    /// Largest triage body read.
    static var maxBodyBytes: Int { 64 * 1024 }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let project = router.group("/v1/projects/:project").add(middleware: ReadAuthenticationMiddleware(store: triage.queries.store))
        project.patch("crashes", use: bulk)
        project.patch("crashes/:id", use: update)
        project.get("crashes/:id/activity", use: activity)
        project.post("crashes/:id/comments", use: comment)
        project.post("crashes/:id/merge", use: merge)
        project.post("crashes/:id/unmerge", use: unmerge)
    }

    @Sendable func merge(request: Request, context: CrashRequestContext) async throws -> GroupBody {
        let project = try context.requireReadProject()
        let group = try context.groupID()
        let into = try await Self.stringMember("into", of: request)
        return try await triage.merge(project, group: group, into: into, actor: context.principal)
    }

    @Sendable func unmerge(request: Request, context: CrashRequestContext) async throws -> GroupBody {
        let project = try context.requireReadProject()
        let target = try context.groupID()
        let group = try await Self.stringMember("group", of: request)
        return try await triage.unmerge(project, target: target, group: group, actor: context.principal)
    }

    /// The string member `name` of a JSON object body; nil when absent or not a string; a body
    /// that is not a JSON object is a 400 naming `name`.
    static func stringMember(_ name: String, of request: Request) async throws -> String? {
        let bytes = try await request.body.collect(upTo: maxBodyBytes)
        guard let object = try? JSONDecoder().decode([String: JSONValue].self, from: Data(bytes.readableBytesView)) else {
            throw APIError.badRequest(#"\#(name): body must be a JSON object like {"\#(name)": "..."}"#)
        }
        guard case .string(let value)? = object[name] else { return nil }
        return value
    }

    @Sendable func update(request: Request, context: CrashRequestContext) async throws -> GroupBody {
        let project = try context.requireReadProject()
        let group = try context.groupID()
        let change = try GroupChange.parse(try await request.body.collect(upTo: Self.maxBodyBytes).readableBytesView)
        return try await triage.update(project, group: group, change, actor: context.principal)
    }

    @Sendable func bulk(request: Request, context: CrashRequestContext) async throws -> BulkUpdateBody {
        let project = try context.requireReadProject()
        let list = try GroupListRequest(QueryParameters(request), project: project)
        let change = try GroupChange.parse(try await request.body.collect(upTo: Self.maxBodyBytes).readableBytesView)
        return BulkUpdateBody(updated: try await triage.bulkUpdate(project, list: list, change, actor: context.principal))
    }

    @Sendable func activity(request: Request, context: CrashRequestContext) async throws -> ActivityListBody {
        let project = try context.requireReadProject()
        let q = QueryParameters(request)
        return try await triage.activity(project, group: try context.groupID(), limit: try q.limit(), cursor: try q.string("cursor"))
    }

    @Sendable func comment(request: Request, context: CrashRequestContext) async throws -> EditedResponse<ActivityEntry> {
        let project = try context.requireReadProject()
        let group = try context.groupID()
        let text = try await Self.stringMember("text", of: request)
        let entry = try await triage.comment(project, group: group, text: text, actor: context.principal)
        return EditedResponse(status: .created, response: entry)
    }
}

/// `PATCH .../crashes?...`: how many groups matched.
struct BulkUpdateBody: Codable, Sendable {
    var updated: Int
}

extension BulkUpdateBody: ResponseEncodable {}
extension ActivityListBody: ResponseEncodable {}
extension ActivityEntry: ResponseEncodable {}
