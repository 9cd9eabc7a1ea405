import Foundation

/// A Sentry envelope (Sentry's developer documentation, "Envelopes"), split into items
/// without copying their payloads:
///
///     {"event_id":"9ec79c33ec9942ab8353589fcb2e04dc","dsn":"https://key@host/42"}\n
///     {"type":"event","length":41}\n
///     {"message":"hello world","level":"error"}\n
///     {"type":"attachment"}\n
///     payload without length, up to the next newline\n
///
/// The header line is a JSON object; each item is a JSON header line with a `type` and an
/// optional `length`, then the payload: exactly `length` bytes when given (a newline after
/// it is optional), else everything up to the next newline or the end. Only the headers are
/// decoded here: payloads stay bytes until a caller asks for them.
struct SentryEnvelope {
    /// The envelope header's fields that ingest uses; everything else is ignored.
    struct Header: Decodable {
        var eventID: String?
        var dsn: String?

        enum CodingKeys: String, CodingKey {
            case eventID = "event_id"
            case dsn
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            eventID = try? container.decodeIfPresent(String.self, forKey: .eventID)
            dsn = try? container.decodeIfPresent(String.self, forKey: .dsn)
        }
    }

    /// One item: its type and its payload's bytes.
    struct Item {
        var type: String
        var payload: ArraySlice<UInt8>
    }

    /// Why an envelope could not be read; the message is for the client.
    struct Malformed: Error, CustomStringConvertible {
        let description: String
    }

    /// Most items in one envelope: SDKs send a handful; the cap bounds the work a body
    /// of tiny items could cause.
    static let maxItems = 1000

    var header: Header
    var items: [Item]

    /// The longest envelope header line read to find a key: SDKs send about 200 bytes (event
    /// id, dsn, SDK name, a trace context).
    static let maxHeaderLineBytes = 64 * 1024

    /// Reads the header line only; returns it and the offset where the items start.
    static func parseHeader(_ bytes: [UInt8]) throws -> (header: Header, itemsStart: Int) {
        guard !bytes.isEmpty else { throw Malformed(description: "envelope is empty") }
        let end = bytes.firstIndex(of: newline) ?? bytes.count
        return (try parseHeaderLine(bytes[0..<end]), min(end + 1, bytes.count))
    }

    /// The envelope header of `line`, the first line without its newline.
    static func parseHeaderLine(_ line: ArraySlice<UInt8>) throws -> Header {
        guard let header = try? decodeObject(Header.self, line) else {
            throw Malformed(description: "envelope header is not a JSON object on the first line")
        }
        return header
    }

    /// Parses the whole envelope.
    static func parse(_ bytes: [UInt8]) throws -> SentryEnvelope {
        let (header, start) = try parseHeader(bytes)
        return SentryEnvelope(header: header, items: try parseItems(bytes, from: start))
    }

    /// The items from `start` to the end of `bytes`.
    static func parseItems(_ bytes: [UInt8], from start: Int) throws -> [Item] {
        struct ItemHeader: Decodable {
            var type: String
            var length: Int?
        }
        var items: [Item] = []
        var position = start
        while position < bytes.count {
            let lineEnd = bytes[position...].firstIndex(of: newline) ?? bytes.count
            let line = bytes[position..<lineEnd]
            // Blank lines between items (a trailing newline, "\r\n" line ends) are not items.
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) {
                position = lineEnd + 1
                continue
            }
            guard items.count < maxItems else {
                throw Malformed(description: "envelope has more than \(maxItems) items")
            }
            let itemHeader: ItemHeader
            do {
                itemHeader = try decodeObject(ItemHeader.self, line)
            } catch {
                throw Malformed(description: "item \(items.count): header is not a JSON object with a string \"type\"")
            }
            let payloadStart = min(lineEnd + 1, bytes.count)
            let payloadEnd: Int
            if let length = itemHeader.length {
                guard length >= 0 else { throw Malformed(description: "item \(items.count): negative length") }
                guard length <= bytes.count - payloadStart else {
                    throw Malformed(description: "item \(items.count): length \(length) runs past the end of the envelope")
                }
                payloadEnd = payloadStart + length
                position = payloadEnd < bytes.count && bytes[payloadEnd] == newline ? payloadEnd + 1 : payloadEnd
            } else {
                payloadEnd = bytes[payloadStart...].firstIndex(of: newline) ?? bytes.count
                position = payloadEnd + 1
            }
            items.append(Item(type: itemHeader.type, payload: bytes[payloadStart..<payloadEnd]))
        }
        return items
    }

    private static let newline = UInt8(ascii: "\n")

    private static func decodeObject<T: Decodable>(_: T.Type, _ line: ArraySlice<UInt8>) throws -> T {
        let trimmed = line.last == 0x0D ? line.dropLast() : line
        guard trimmed.first(where: { $0 != 0x20 && $0 != 0x09 }) == UInt8(ascii: "{") else {
            throw Malformed(description: "not a JSON object")
        }
        return try JSONDecoder().decode(T.self, from: Data(trimmed))
    }
}
