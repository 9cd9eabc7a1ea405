import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `GET /openapi.json` is the document in docs/, and real responses match its schemas.
@Suite struct QueryOpenAPITests {
    /// The route serves docs/openapi.json itself (embedded through the Resources/ symlink).
    @Test func servedDocumentIsTheRepositoryFile() async throws {
        let file = try Data(contentsOf: TestEnvironment.repoRoot.appendingPathComponent("docs/openapi.json"))
        try await withApp { client in
            let response = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(response.status == .ok)
            #expect(Data(response.body.readableBytesView) == file)
            let doc = try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any]
            #expect(doc?["openapi"] as? String == "3.1.0")
        }
    }

    @Test func responsesMatchTheirSchemas() async throws {
        let doc = try #require(
            try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
        let validator = SchemaValidator(document: doc)
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            // Ingest, checked against the 202 schema.
            let ingest = try await client.ingest(
                key: p.ingestKey,
                body: batchBody([
                    queryReport("openapi", at: now, fatal: true, stack: ["a"], context: ["k": "v"]).object,
                    queryReport("openapi", at: now.addingTimeInterval(-60), os: nil, model: nil, device: nil).object, ["id": 1],
                ]))
            try validator.check(ingest, path: "/v1/reports", method: "post", status: "202")
            let base = "/v1/projects/\(p.project)"
            let list = try await client.execute(uri: base + "/crashes?limit=1", method: .get, headers: auth(p.readToken))
            try validator.check(list, path: "/v1/projects/{project}/crashes", method: "get", status: "200")
            let body = try JSONSerialization.jsonObject(with: Data(list.body.readableBytesView)) as? [String: Any]
            let id = try #require((body?["groups"] as? [[String: Any]])?.first?["id"] as? String)
            let checks: [(String, HTTPRequest.Method, String?, String, String)] = [
                (base + "/crashes/\(id)", .get, nil, "/v1/projects/{project}/crashes/{id}", "200"),
                (base + "/crashes/\(id)/reports?limit=1", .get, nil, "/v1/projects/{project}/crashes/{id}/reports", "200"),
                (base + "/crashes/\(id)", .patch, #"{"status":"resolved","resolvedIn":"2.0"}"#, "/v1/projects/{project}/crashes/{id}", "200"),
                (base + "/stats?groupBy=kind", .get, nil, "/v1/projects/{project}/stats", "200"),
                (base + "/stats", .get, nil, "/v1/projects/{project}/stats", "200"),
                (base + "/crashes?limit=0", .get, nil, "/v1/projects/{project}/crashes", "400"),
                (base + "/crashes/999999999", .get, nil, "/v1/projects/{project}/crashes/{id}", "404"),
                ("/healthz", .get, nil, "/healthz", "200"),
                ("/readyz", .get, nil, "/readyz", "200"),
            ]
            for (uri, method, payload, path, status) in checks {
                var headers = auth(p.readToken)
                if payload != nil { headers[.contentType] = "application/json" }
                let response = try await client.execute(
                    uri: uri, method: method, headers: headers, body: payload.map { ByteBuffer(string: $0) })
                try validator.check(response, path: path, method: method.rawValue.lowercased(), status: status)
            }
            let unauthorized = try await client.execute(uri: base + "/crashes", method: .get)
            try validator.check(unauthorized, path: "/v1/projects/{project}/crashes", method: "get", status: "401")
        }
    }

    /// Parameters are declared once in `components.parameters` and referenced from every
    /// operation; every `$ref` of the document resolves.
    @Test func parametersAreSharedThroughComponents() throws {
        let doc = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
        let components = try #require(doc["components"] as? [String: Any])
        let shared = try #require(components["parameters"] as? [String: Any])
        var referenced = Set<String>()
        for case let (path, item as [String: Any]) in try #require(doc["paths"] as? [String: Any]) {
            for case let (method, operation as [String: Any]) in item {
                for parameter in operation["parameters"] as? [[String: Any]] ?? [] {
                    let ref = try #require(parameter["$ref"] as? String, "\(method) \(path): inline parameter \(parameter)")
                    referenced.insert(ref)
                }
            }
        }
        #expect(Set(shared.keys.map { "#/components/parameters/" + $0 }) == referenced)
        func refs(_ value: Any) -> [String] {
            if let object = value as? [String: Any] {
                return (object["$ref"] as? String).map { [$0] } ?? object.values.flatMap(refs)
            }
            return (value as? [Any])?.flatMap(refs) ?? []
        }
        for ref in refs(doc) {
            let parts = ref.split(separator: "/").dropFirst().map(String.init)
            var node: Any? = doc
            for part in parts { node = (node as? [String: Any])?[part] }
            #expect(node != nil, "\(ref) does not resolve")
        }
    }

    private func auth(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)"] }
}

/// The part of JSON Schema the document uses: `$ref`, `allOf`, `type` (one or a list),
/// `required`, `properties`, `items`, `enum`, `minimum`, `maxItems`, `format: date-time`.
struct SchemaValidator: @unchecked Sendable {
    let document: [String: Any]

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Checks `response` has `status` and a body valid against that operation's schema.
    func check(_ response: TestResponse, path: String, method: String, status: String) throws {
        guard String(response.status.code) == status else {
            throw Failure(description: "\(method) \(path): status \(response.status.code), expected \(status)")
        }
        let paths = document["paths"] as? [String: Any]
        guard let operation = (paths?[path] as? [String: Any])?[method] as? [String: Any],
            let declared = (operation["responses"] as? [String: Any])?[status] as? [String: Any],
            let schema = ((declared["content"] as? [String: Any])?["application/json"] as? [String: Any])?["schema"]
        else { throw Failure(description: "\(method) \(path) \(status): not in the document") }
        let body = try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView), options: [.fragmentsAllowed])
        try validate(body, schema, at: "\(method) \(path) \(status)")
    }

    func validate(_ value: Any, _ schemaValue: Any, at where_: String) throws {
        guard var schema = schemaValue as? [String: Any] else { return }
        if let ref = schema["$ref"] as? String {
            let name = String(ref.split(separator: "/").last ?? "")
            schema = ((document["components"] as? [String: Any])?["schemas"] as? [String: Any])?[name] as? [String: Any] ?? [:]
            return try validate(value, schema, at: where_ + "→" + name)
        }
        for part in schema["allOf"] as? [Any] ?? [] { try validate(value, part, at: where_) }
        if let type = schema["type"] {
            let types = (type as? [String]) ?? [type as? String ?? ""]
            guard types.contains(where: { matches(value, $0) }) else {
                throw Failure(description: "\(where_): \(value) is not \(types)")
            }
        }
        if let options = schema["enum"] as? [String], let text = value as? String, !options.contains(text) {
            throw Failure(description: "\(where_): \(text) not in \(options)")
        }
        if schema["format"] as? String == "date-time", let text = value as? String, RFC3339.parse(text) == nil {
            throw Failure(description: "\(where_): \(text) is not a date-time")
        }
        if let minimum = schema["minimum"] as? Int, let n = value as? Int, n < minimum {
            throw Failure(description: "\(where_): \(n) < \(minimum)")
        }
        if let object = value as? [String: Any] {
            for key in schema["required"] as? [String] ?? [] where object[key] == nil {
                throw Failure(description: "\(where_): missing required \(key) in \(object.keys.sorted())")
            }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for (key, child) in object {
                if let sub = properties[key] { try validate(child, sub, at: where_ + "." + key) }
            }
            if let extra = schema["additionalProperties"] {
                for (key, child) in object where properties[key] == nil { try validate(child, extra, at: where_ + "." + key) }
            }
        }
        if let array = value as? [Any], let items = schema["items"] {
            if let max = schema["maxItems"] as? Int, array.count > max {
                throw Failure(description: "\(where_): \(array.count) items > \(max)")
            }
            for (i, element) in array.enumerated() { try validate(element, items, at: where_ + "[\(i)]") }
        }
    }

    private func matches(_ value: Any, _ type: String) -> Bool {
        let isBool = String(describing: Swift.type(of: value)).lowercased().contains("bool")
        switch type {
        case "null": return value is NSNull
        case "string": return value is String
        case "boolean": return isBool || value is Bool
        case "integer": return !isBool && (value as? NSNumber).map { $0.doubleValue == $0.doubleValue.rounded() } ?? false
        case "number": return !isBool && value is NSNumber
        case "array": return value is [Any]
        case "object": return value is [String: Any]
        default: return false
        }
    }
}
