import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Optional response fields are `null`, never missing keys (api-v1.md), through
/// `@NullWhenAbsent` and synthesized Codable rather than hand-written `encode(to:)`.
@Suite struct NullWhenAbsentTests {
    func object(_ value: some Encodable) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: JSONEncoder().encode(value)) as? [String: Any])
    }

    @Test func absentOptionalsAreNullKeys() throws {
        let hook = WebhookBody(
            id: "1", url: "https://example.com/h", events: ["group.new"], format: "json", createdAt: Date(timeIntervalSince1970: 0),
            lastDelivery: nil)
        let json = try object(hook)
        #expect(Set(json.keys) == ["id", "url", "events", "format", "createdAt", "lastDelivery"])
        #expect(json["lastDelivery"] is NSNull)

        let last = WebhookBody.LastDelivery(
            id: "d", event: "group.new", status: "retrying", at: Date(timeIntervalSince1970: 0), attempts: 1, httpStatus: nil, error: nil)
        let lastJSON = try object(last)
        #expect(Set(lastJSON.keys) == ["id", "event", "status", "at", "attempts", "httpStatus", "error"])
        #expect(lastJSON["httpStatus"] is NSNull && lastJSON["error"] is NSNull)
        let present = try object(
            WebhookBody.LastDelivery(
                id: "d", event: "group.new", status: "delivered", at: Date(timeIntervalSince1970: 0), attempts: 2, httpStatus: 200, error: "x"))
        #expect(present["httpStatus"] as? Int == 200 && present["error"] as? String == "x")
    }

    @Test func decodingTakesMissingAndNullAsNil() throws {
        let missing = #"{"id":"1","url":"u","events":[],"format":"json","createdAt":0}"#
        let null = #"{"id":"1","url":"u","events":[],"format":"json","createdAt":0,"lastDelivery":null}"#
        for text in [missing, null] {
            let hook = try JSONDecoder().decode(WebhookBody.self, from: Data(text.utf8))
            #expect(hook.lastDelivery == nil)
        }
        let hook = WebhookBody(
            id: "1", url: "u", events: [], format: "json", createdAt: Date(timeIntervalSince1970: 0),
            lastDelivery: .init(id: "d", event: "e", status: "failed", at: Date(timeIntervalSince1970: 5), attempts: 3, httpStatus: nil, error: "e"))
        #expect(try JSONDecoder().decode(WebhookBody.self, from: JSONEncoder().encode(hook)) == hook)
    }
}
