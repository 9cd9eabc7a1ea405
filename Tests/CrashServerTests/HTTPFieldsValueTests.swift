import HTTPTypes
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

@Suite struct HTTPFieldsValueTests {
    /// The same as swift-http-types' subscript: absent, sent once, sent several times (joined
    /// in order), names in any case.
    @Test func matchesTheSubscript() throws {
        let key = try #require(HTTPField.Name("X-Crash-Key"))
        var fields: HTTPFields = [.contentType: "application/json", .contentLength: "12"]
        fields.append(HTTPField(name: try #require(HTTPField.Name("x-crash-key")), value: "k1"))
        #expect(fields.value(.contentEncoding) == nil)
        #expect(fields.value(.contentType) == "application/json")
        #expect(fields.value(key) == "k1")
        fields.append(HTTPField(name: key, value: "k2"))
        fields.append(HTTPField(name: .contentType, value: "text/plain"))
        for name in [HTTPField.Name.contentEncoding, .contentType, .contentLength, key] {
            #expect(fields.value(name) == fields[name])
        }
        #expect(fields.value(key) == "k1, k2")
    }
}
