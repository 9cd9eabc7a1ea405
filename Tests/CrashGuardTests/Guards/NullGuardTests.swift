import CrashGuard
import CrashWire
import Foundation
import Testing

@Suite("null guard")
struct NullGuardTests {
    static let body = Data(
        #"{"flag": "0", "msg": "Some message", "data": null, "count": 42, "ratio": 2.5, "items": [{"name": "a"}, null], "ok": true, "n": "17"}"#.utf8)

    @Test func unguardedNullCastDies() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            let json = try! JSONSerialization.jsonObject(with: Data(#"{"data": null}"#.utf8)) as! [String: Any]
            _ = (json["data"] as! String).lowercased()
        }
    }

    @Test func nullAnswersTheDefault() throws {
        let json = try GuardedJSON(data: Self.body)
        let (value, events) = recording { json["data"].string(default: "") }
        #expect(value == "")
        let event = expectOne(events, .null, "-[NSNull stringValue]: null where String expected at $.data")
        #expect(event?.context["path"] == "$.data")
        #expect(recording { json["data"].int(default: 0) }.value == 0)
        #expect(recording { json["data"].array() }.value.isEmpty)
        #expect(recording { json["data"].dictionary() }.value.isEmpty)
        #expect(json["data"].isNull && json["data"].exists)
    }

    @Test func throughNullReportsTheNullStep() throws {
        let json = try GuardedJSON(data: Self.body)
        let (value, events) = recording { json["data"]["user"]["name"].string() }
        #expect(value == nil)
        expectOne(events, .null, "-[NSNull objectForKey:]: null where a container was expected at $.data")
        let element = recording { json["items"][1]["name"].string(default: "?") }
        #expect(element.value == "?")
        expectOne(element.events, .null, "-[NSNull objectForKey:]: null where a container was expected at $.items[1]")
    }

    @Test func missingKeyIsNotRecorded() throws {
        let json = try GuardedJSON(data: Self.body)
        let (value, events) = recording { (json["nope"].string(default: "x"), json["items"][9]["name"].int()) }
        #expect(value.0 == "x" && value.1 == nil)
        #expect(events.isEmpty)
        #expect(!json["nope"].exists)
    }

    @Test func wrongTypeIsRecorded() throws {
        let json = try GuardedJSON(data: Self.body)
        let (value, events) = recording { json["items"].string(default: "none") }
        #expect(value == "none")
        expectOne(events, .null, "-[Array stringValue]: Array where String expected at $.items")
        expectOne(recording { json["msg"].int() }.events, .null, "-[String integerValue]: String where Int expected at $.msg")
    }

    @Test func numbersAndStringsAreCoerced() throws {
        let json = try GuardedJSON(data: Self.body)
        let (values, events) = recording {
            (
                json["count"].int(), json["count"].string(), json["n"].int(), json["flag"].bool(),
                json["ratio"].double(), json["ratio"].int(), json["ok"].bool(), json["ok"].string(), json["msg"].string()
            )
        }
        #expect(events.isEmpty)
        #expect(values.0 == 42)
        #expect(values.1 == "42")
        #expect(values.2 == 17)
        #expect(values.3 == false)
        #expect(values.4 == 2.5)
        #expect(values.5 == 2)
        #expect(values.6 == true)
        #expect(values.7 == "true")
        #expect(values.8 == "Some message")
        #expect(json["items"].array().first?["name"].string() == "a")
    }

    @Test func anyTrees() {
        let tree: [String: Any] = ["a": ["b": [1, 2, NSNull()]], "s": "x"]
        let json = GuardedJSON(tree)
        let (value, events) = recording { (json["a"]["b"][1].int(), json["a"]["b"][2].int(default: -1)) }
        #expect(value.0 == 2 && value.1 == -1)
        expectOne(events, .null, "-[NSNull integerValue]: null where Int expected at $.a.b[2]")
        #expect(json["a"]["b"].array().count == 3)
    }
}
