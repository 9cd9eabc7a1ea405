import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The query routes over ``InMemoryCrashStore``: no PostgreSQL, so every run checks the
/// HTTP shape (statuses, headers, error bodies, validation, pagination). The same routes run
/// against PostgreSQL in ``QueryTests`` and ``CursorTests``.
@Suite struct QueryRouteTests {
    let store = InMemoryCrashStore()
    let project: ProjectRef
    let now = Date()

    init() {
        project = store.addProject(slug: "demo", readToken: "crt_demo")
        store.addProject(slug: "other", readToken: "crt_other")
    }

    func withClient(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let router = Router(context: CrashRequestContext.self)
        router.add(middleware: ErrorMiddleware())
        QueryController(store: store).addRoutes(to: router)
        try await Application(router: router).test(.router) { client in try await body(client) }
    }

    func get(_ client: some TestClientProtocol, _ uri: String, token: String? = "crt_demo") async throws -> TestResponse {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        return try await client.execute(uri: uri, method: .get, headers: headers, body: nil)
    }

    func error(_ response: TestResponse) -> String? {
        ((try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any])?["error"] as? String
    }

    @Test func authenticationIs401Or404BeforeAnyRead() async throws {
        try await withClient { client in
            let missing = try await get(client, "/v1/projects/demo/crashes", token: nil)
            #expect(missing.status == .unauthorized)
            #expect(missing.headers[.wwwAuthenticate] == "Bearer")
            #expect(error(missing) == "missing Authorization: Bearer <read token>")
            var headers: HTTPFields = [.authorization: "Basic abc"]
            let basic = try await client.execute(uri: "/v1/projects/demo/stats", method: .get, headers: headers, body: nil)
            #expect(basic.status == .unauthorized)
            #expect(error(basic) == "Authorization must be: Bearer <read token>")
            headers[.authorization] = "Bearer nope"
            let unknown = try await client.execute(uri: "/v1/projects/demo/crashes/1", method: .get, headers: headers, body: nil)
            #expect(unknown.status == .unauthorized)
            #expect(error(unknown) == "unknown read token")
            let other = try await get(client, "/v1/projects/demo/crashes", token: "crt_other")
            #expect(other.status == .notFound)
            #expect(error(other) == "no project 'demo'")
            let noSuchProject = try await get(client, "/v1/projects/ghost/stats")
            #expect(noSuchProject.status == .notFound)
        }
    }

    @Test func listIsJSONWithGroupsAndANullCursor() async throws {
        let a = store.add(project, signature: "a", at: now.addingTimeInterval(-60))
        store.add(project, signature: "a", at: now.addingTimeInterval(-50), device: "device-2")
        store.add(project, signature: "b", at: now.addingTimeInterval(-40))
        try await withClient { client in
            let response = try await get(client, "/v1/projects/demo/crashes")
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/json; charset=utf-8")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any])
            #expect(json["nextCursor"] is NSNull)
            let groups = try #require(json["groups"] as? [[String: Any]])
            #expect(groups.map { $0["id"] as? String } == [String(a), String(a + 1)])
            #expect(groups.first?["count"] as? Int == 2)
            #expect(groups.first?["devices"] as? Int == 2)
            #expect(groups.first?["resolvedIn"] is NSNull)
            #expect(groups.first?["status"] as? String == "open")
        }
    }

    @Test func countPagesWalkEveryGroupOnce() async throws {
        for i in 0..<7 {
            for _ in 0...(i % 3) { store.add(project, signature: "g\(i)", at: now.addingTimeInterval(Double(-100 - i))) }
        }
        try await withClient { client in
            var seen: [String] = []
            var uri = "/v1/projects/demo/crashes?limit=3"
            var pages = 0
            while true {
                let response = try await get(client, uri)
                #expect(response.status == .ok)
                let body = try JSONDecoder.crashWire().decode(GroupListBody.self, from: Data(response.body.readableBytesView))
                seen += body.groups.map(\.id)
                pages += 1
                guard let next = body.nextCursor else { break }
                uri = "/v1/projects/demo/crashes?limit=3&cursor=\(next)"
            }
            #expect(pages == 3)
            #expect(seen.count == 7 && Set(seen).count == 7)
            // Forged and other-sort cursors are 400s, never a server error.
            let forged = try await get(client, "/v1/projects/demo/crashes?cursor=bm9wZQ")
            #expect(forged.status == .badRequest)
            #expect(error(forged) == "cursor: not a cursor from this list (use nextCursor as returned, on the same project, list and sort)")
        }
    }

    @Test func badParametersAre400sNamingTheParameter() async throws {
        try await withClient { client in
            let cases: [(String, String)] = [
                ("crashes?sort=hot", "sort: not one of count, lastSeen, firstSeen"),
                ("crashes?status=done", "status: not one of open, resolved, ignored, regressed"),
                ("crashes?trend=week", "trend: must be hour or day"),
                ("crashes?limit=0", "limit: must be an integer from 1 to 200"),
                ("crashes?kind=", "kind: must not be empty"),
                ("stats?interval=minute", "interval: must be hour or day"),
                ("stats?groupBy=os", "groupBy: must be none, kind, version, fatal or environment"),
                ("stats?from=yesterday", "from: not an RFC 3339 date-time"),
            ]
            for (query, message) in cases {
                let response = try await get(client, "/v1/projects/demo/" + query)
                #expect(response.status == .badRequest, "\(query)")
                #expect(error(response) == message, "\(query)")
                #expect(response.headers[.contentType] == "application/json; charset=utf-8")
            }
            let kind = try await get(client, "/v1/projects/demo/crashes?kind=segfault")
            #expect(error(kind)?.hasPrefix("kind: not one of unrecognizedSelector, ") == true)
        }
    }

    @Test func detailAndReportsOf404Groups() async throws {
        let theirs = store.addProject(slug: "third", readToken: "crt_third")
        let foreign = store.add(theirs, signature: "x", at: now.addingTimeInterval(-10))
        try await withClient { client in
            for uri in ["crashes/999", "crashes/\(foreign)", "crashes/\(foreign)/reports"] {
                let response = try await get(client, "/v1/projects/demo/" + uri)
                #expect(response.status == .notFound, "\(uri)")
                #expect(error(response)?.hasPrefix("no crash group \(uri.contains("999") ? 999 : foreign) in project 'demo'") == true)
            }
            let notAnID = try await get(client, "/v1/projects/demo/crashes/abc")
            #expect(notAnID.status == .notFound)
            #expect(error(notAnID) == "no crash group 'abc'")
        }
    }

    @Test func reportsPageNewestFirstWithACursor() async throws {
        var last: Int64 = 0
        for i in 0..<5 { last = store.add(project, signature: "r", at: now.addingTimeInterval(Double(-10 * i))) }
        let group = last
        try await withClient { client in
            let first = try await get(client, "/v1/projects/demo/crashes/\(group)/reports?limit=2")
            let one = try JSONDecoder.crashWire().decode(ReportListBody.self, from: Data(first.body.readableBytesView))
            #expect(one.reports.count == 2)
            #expect(one.reports[0].timestamp > one.reports[1].timestamp)
            #expect(one.reports[0].stack != nil)
            var all = one.reports
            var cursor = one.nextCursor
            while let next = cursor {
                let response = try await get(client, "/v1/projects/demo/crashes/\(group)/reports?limit=2&cursor=\(next)")
                let page = try JSONDecoder.crashWire().decode(ReportListBody.self, from: Data(response.body.readableBytesView))
                all += page.reports
                cursor = page.nextCursor
            }
            #expect(all.count == 5 && Set(all.map(\.id)).count == 5)
            // A cursor of one group's reports is refused on another's.
            let other = store.add(project, signature: "s", at: now)
            let wrong = try await get(client, "/v1/projects/demo/crashes/\(other)/reports?cursor=\(one.nextCursor!)")
            #expect(wrong.status == .badRequest)
            #expect(error(wrong) == "cursor: not a cursor from this list (use nextCursor as returned)")
        }
    }

    @Test func statsSeriesByFatal() async throws {
        store.add(project, signature: "f", at: now.addingTimeInterval(-30), fatal: true)
        store.add(project, signature: "n", at: now.addingTimeInterval(-20))
        try await withClient { client in
            let response = try await get(client, "/v1/projects/demo/stats?groupBy=fatal&interval=day")
            #expect(response.status == .ok)
            let body = try JSONDecoder.crashWire().decode(StatsBody.self, from: Data(response.body.readableBytesView))
            #expect(body.series.map(\.key) == ["fatal", "nonFatal"])
            #expect(body.series.map { $0.points.map(\.count).reduce(0, +) } == [1, 1])
        }
    }

    /// In authentication or in the query itself: a PostgreSQL restart while a list is read
    /// is 503, not 500 (the fault suite saw a 500 for a query during a restart).
    @Test(arguments: [false, true])
    func onlyAConnectionFailureIs503(authenticates: Bool) async throws {
        for (error, status) in [
            (DeadlineExceeded() as any Error & Sendable, HTTPResponse.Status.serviceUnavailable),
            (try await refusedConnectionError(), .serviceUnavailable),
            (CancellationError(), .internalServerError),
        ] {
            let router = Router(context: CrashRequestContext.self)
            router.add(middleware: ErrorMiddleware())
            QueryController(store: FailingStore(error: error, authenticates: authenticates)).addRoutes(to: router)
            try await Application(router: router).test(.router) { client in
                let response = try await client.execute(
                    uri: "/v1/projects/demo/crashes", method: .get, headers: [.authorization: "Bearer crt_demo"], body: nil)
                #expect(response.status == status, "\(error)")
                #expect((response.headers[.retryAfter] != nil) == (status == .serviceUnavailable))
            }
        }
    }
}

/// The real `PSQLError` of a PostgreSQL that is not there (a restart, seen from the pool).
private func refusedConnectionError() async throws -> PSQLError {
    let configuration = PostgresConnection.Configuration(
        host: "127.0.0.1", port: 1, username: "crashguard", password: nil, database: nil, tls: .disable)
    do {
        _ = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: TestEnvironment.logger)
    } catch let error as PSQLError {
        return error
    }
    throw CancellationError()  // something listens on port 1: no refusal to test with
}

/// A store whose every call fails with `error`.
private struct FailingStore: QueryStore {
    let error: any Error & Sendable
    /// Whether the read token resolves (so the failure is in the query, not in authentication).
    var authenticates = false

    func project(readToken: String) async throws -> ProjectRef? {
        guard authenticates else { throw error }
        return ProjectRef(id: 1, slug: "demo")
    }
    func read<T: Sendable>(_ body: (InMemoryCrashStore.Reader) async throws -> T) async throws -> T { throw error }
    func saveListSnapshot(_ snapshot: String) async throws -> Int64 { throw error }
}
