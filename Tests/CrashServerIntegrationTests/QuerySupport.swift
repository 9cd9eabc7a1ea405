import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Helpers of the query tests: authenticated requests, JSON bodies, report builders.
extension TestClientProtocol {
    /// A request with `Authorization: Bearer token`; the body decoded as a JSON object.
    func query(
        _ uri: String, token: String?, method: HTTPRequest.Method = .get, body: String? = nil
    ) async throws -> (status: HTTPResponse.Status, json: [String: Any]) {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        if body != nil { headers[.contentType] = "application/json" }
        let response = try await execute(
            uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
        let json = (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:]
        return (response.status, json)
    }

    /// Walks a list from `uri` (which has a query string) page by page through `nextCursor`;
    /// `page` sees each answer as it comes. Returns the pages' bodies in order.
    func walk(
        _ uri: String, token: String?, _ page: ((status: HTTPResponse.Status, json: [String: Any])) throws -> Void
    ) async throws -> [[String: Any]] {
        var bodies: [[String: Any]] = []
        var cursor: String?
        repeat {
            let answer = try await query(uri + (cursor.map { "&cursor=\($0)" } ?? ""), token: token)
            try page(answer)
            bodies.append(answer.json)
            cursor = answer.json["nextCursor"] as? String
            // A cursor that never ends the walk fails it instead of looping forever.
            try #require(bodies.count < 10_000, "\(uri): still a next cursor after 10,000 pages")
        } while cursor != nil
        return bodies
    }

    /// Ingests `reports`; expects all accepted.
    func send(_ reports: [TestReport], key: String) async throws {
        for chunk in stride(from: 0, to: reports.count, by: 500) {
            let part = reports[chunk..<min(chunk + 500, reports.count)].map(\.object)
            let response = try await ingest(key: key, body: batchBody(part))
            #expect(response.status == .accepted)
            let body = try response.decode(IngestResponse.self)
            #expect(body.accepted + body.duplicates == part.count, "rejected: \(body.rejected)")
        }
    }
}

/// A report with the fields the query tests vary.
func queryReport(
    _ reason: String, at time: Date, kind: String = "custom", version: String = "1.0.0", app: String = "com.example.demo",
    os: String? = "iOS", model: String? = "iPhone14,2", device: String? = "device-1", fatal: Bool? = nil,
    id: UUID = UUID(), stack: [String]? = nil, context: [String: String]? = nil
) -> TestReport {
    var report: [String: Any] = [
        "id": id.uuidString.lowercased(), "timestamp": RFC3339.format(time), "kind": kind,
        "reason": reason, "app": ["id": app, "version": version],
    ]
    var dev: [String: Any] = [:]
    if let os { dev["os"] = os }
    if let model { dev["model"] = model }
    if let device { dev["id"] = device }
    if !dev.isEmpty { report["device"] = dev }
    if let fatal { report["fatal"] = fatal }
    if let stack { report["stack"] = stack }
    if let context { report["context"] = context }
    return TestReport(object: report)
}

/// A report as a JSON object, sendable into test closures (never mutated after creation).
struct TestReport: @unchecked Sendable {
    let object: [String: Any]
    subscript(key: String) -> Any? { object[key] }
}

/// Midnight UTC `days` days before today.
func utcMidnight(daysAgo days: Int) -> Date {
    TimeWindow.floor(Date(), TimeWindow.day).addingTimeInterval(-Double(days) * TimeWindow.day)
}

func q(_ date: Date) -> String {
    RFC3339.format(date).replacingOccurrences(of: "+", with: "%2B").replacingOccurrences(of: ":", with: "%3A")
}

extension Dictionary where Key == String, Value == Any {
    var groups: [[String: Any]] { self["groups"] as? [[String: Any]] ?? [] }
    var error: String { self["error"] as? String ?? "" }
}

extension Array where Element == [String: Any] {
    /// Titles in order.
    var titles: [String] { map { $0["title"] as? String ?? "?" } }
    /// Group by title.
    func titled(_ title: String) -> [String: Any]? { first { $0["title"] as? String == title } }
}
