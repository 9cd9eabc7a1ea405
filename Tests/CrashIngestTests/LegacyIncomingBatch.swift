import CrashWire
import Foundation

@testable import CrashIngest

/// The oracle of the differential tests: the server's ingest decoding before the streaming
/// reader (issue 13), `JSONDecoder` over the whole body, kept here as it was so that the
/// new reader is checked against it: same decisions, same values, same messages.
///
/// The ingest body as decoded leniently: the batch is valid JSON with a `reports` array,
/// but each element may still be a rejected report, with the field that is wrong named.
struct IncomingBatch: Decodable {
    var reports: [Slot]

    /// One element of `reports`: a decoded report or why it could not be decoded.
    struct Slot: Decodable {
        var result: Result<Report, ReportDecodingFailure>

        init(from decoder: any Decoder) throws {
            do {
                result = .success(try Report(from: decoder))
            } catch let error as DecodingError {
                result = .failure(ReportDecodingFailure(error, depth: decoder.codingPath.count))
            } catch {
                // Foundation's own (non-DecodingError) errors, thrown while it decodes the
                // strings of one element: that element is rejected, the others stand.
                result = .failure(ReportDecodingFailure(message: "report: not valid JSON"))
            }
        }
    }

    /// Decodes the body: throws a 400 unless it is JSON with a `reports` array.
    static func decode(_ bytes: [UInt8]) throws -> IncomingBatch {
        guard !bytes.isEmpty else { throw IngestError.badRequest("body is empty: expected a JSON object with a \"reports\" array") }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw IngestError.badRequest("body is not JSON: invalid UTF-8") }
        if let (offset, byte) = Self.rawControlCharacterInString(bytes) {
            // RFC 8259: control characters in strings must be escaped. Foundation notices
            // only when it decodes that string (in key order, random per process), so check
            // here and give every such body the same answer.
            let code = String(byte, radix: 16, uppercase: true)
            throw IngestError.badRequest(
                "body is not JSON: unescaped control character U+\(String(repeating: "0", count: 4 - code.count))\(code) in a string at byte \(offset)"
            )
        }
        do {
            return try JSONDecoder.crashWire().decode(IncomingBatch.self, from: Data(bytes))
        } catch DecodingError.keyNotFound(let key, let context) where context.codingPath.isEmpty && key.stringValue == "reports" {
            throw IngestError.badRequest("body has no \"reports\" array")
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.isEmpty {
            throw IngestError.badRequest("body is not a JSON object with a \"reports\" array")
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.count == 1 {
            throw IngestError.badRequest("\"reports\" is not an array")
        } catch DecodingError.valueNotFound(_, let context) where context.codingPath.count <= 1 {
            throw IngestError.badRequest("\"reports\" is not an array")
        } catch {
            throw IngestError.badRequest("body is not JSON")
        }
    }
}

extension IncomingBatch {
    /// The first byte below U+0020 inside a JSON string, with its offset: one pass that
    /// tracks quotes and backslash escapes.
    static func rawControlCharacterInString(_ bytes: [UInt8]) -> (offset: Int, byte: UInt8)? {
        var inString = false
        var escaped = false
        for (offset, byte) in bytes.enumerated() {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                } else if byte < 0x20 {
                    return (offset, byte)
                }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            }
        }
        return nil
    }
}

/// Why one report could not be decoded, as `field: problem`.
struct ReportDecodingFailure: Error {
    let message: String

    init(message: String) {
        self.message = message
    }

    init(_ error: DecodingError, depth: Int) {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            var parts = Array(codingPath.dropFirst(depth))
            if let last { parts.append(last) }
            var text = ""
            for key in parts {
                if let index = key.intValue {
                    text += "[\(index)]"
                } else {
                    text += text.isEmpty ? key.stringValue : "." + key.stringValue
                }
            }
            return text
        }
        switch error {
        case .keyNotFound(let key, let context):
            message = "\(path(context.codingPath, key)): required"
        case .valueNotFound(_, let context):
            let field = path(context.codingPath)
            message = field.isEmpty ? "report: must be an object" : "\(field): must not be null"
        case .typeMismatch(let type, let context):
            let field = path(context.codingPath)
            message = field.isEmpty ? "report: must be an object" : "\(field): expected \(Self.describe(type))"
        case .dataCorrupted(let context):
            let field = path(context.codingPath)
            switch field {
            case "id": message = "id: not a UUID"
            case "timestamp": message = "timestamp: not an RFC 3339 date-time"
            case "kind": message = "kind: not one of \(ReportKind.allCases.map(\.rawValue).joined(separator: ", "))"
            default: message = "\(field.isEmpty ? "report" : field): invalid value"
            }
        @unknown default:
            message = "report: invalid"
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Bool.Type: return "a boolean"
        case is [String].Type: return "an array of strings"
        case is [String: String].Type: return "an object of strings"
        case is Double.Type, is Int.Type: return "a number"
        default:
            let name = String(describing: type)
            if name.hasPrefix("Array") { return "an array" }
            if name.hasPrefix("Dictionary") || name.contains("KeyedDecodingContainer") { return "an object" }
            return "a valid \(name)"
        }
    }
}
