import Foundation

/// The opaque `cursor` of a list: where the previous page ended, plus what keeps the walk
/// stable. Small whatever the database's load: the first page's snapshot is kept
/// server-side (`list_snapshots`) and the cursor carries only its id. Every field is
/// checked on the way in, so a forged or damaged cursor is a 400, never a database error.
///
/// Bound to the list that issued it (contract, "Bounded queries"): it carries the project
/// and the list (``Order``: the crash list in one sort, or the reports of one group), and
/// any other project or list refuses it with a 400 naming `cursor`. A cursor holds no secret
/// (every field is the reader's own data), so the binding is a check, not a signature.
struct ListCursor: Codable, Sendable, Equatable {
    /// What the cursor walks: a crash list in one sort, or a group's reports.
    enum Order: String, Codable, Sendable {
        case count = "c", lastSeen = "l", firstSeen = "f", reports = "r"

        init(_ sort: GroupSort) {
            switch sort {
            case .count: self = .count
            case .lastSeen: self = .lastSeen
            case .firstSeen: self = .firstSeen
            }
        }
    }

    var order: Order
    /// The project whose list issued the cursor.
    var project: Int64
    /// The last item's sort key: a count, or a time in microseconds since 1970.
    var key: Int64
    /// The last item's group id (for reports: the group listed).
    var groupID: Int64
    /// The last report's id (reports only).
    var reportID: UUID?
    /// The window of the first page, in microseconds since 1970 (group lists only).
    var from: Int64?
    var to: Int64?
    /// The `list_snapshots` row holding the first page's database snapshot (group lists).
    var snapshot: Int64?

    /// Short keys: the cursor travels in a URL.
    private enum CodingKeys: String, CodingKey {
        case order = "s", project = "p", key = "k", groupID = "i", reportID = "u", from = "f", to = "t", snapshot = "n"
    }

    /// Microseconds of 0001-01-01 and of 9999-12-31T23:59:59.999999Z: the times a cursor may carry.
    static let timeRange: ClosedRange<Int64> = -62_135_596_800_000_000...253_402_300_799_999_999

    /// base64url of the JSON, unpadded.
    func encode() -> String {
        let data = (try? JSONEncoder().encode(self)) ?? Data()
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The window the cursor was made for, with the checks of `from`/`to`.
    var window: TimeWindow? {
        get throws {
            guard let from, let to else { return nil }
            return try TimeWindow.checked(from: Self.date(from), to: Self.date(to), name: "cursor")
        }
    }

    /// Decodes and checks a cursor of `order` issued by a list of `project`.
    static func decode(_ text: String, order: Order, project: Int64) throws -> ListCursor {
        let unknown = APIError.badRequest(
            "cursor: not a cursor from this list (use nextCursor as returned, on the same project, list and sort)")
        guard text.utf8.allSatisfy({ c in Self.base64URL.contains(c) }) else { throw unknown }
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64), let cursor = try? JSONDecoder().decode(ListCursor.self, from: data),
            cursor.order == order, cursor.project == project
        else { throw unknown }
        let malformed = APIError.badRequest("cursor: malformed")
        guard cursor.groupID > 0 else { throw malformed }
        switch order {
        case .count:
            guard cursor.key >= 0 else { throw malformed }
        case .lastSeen, .firstSeen, .reports:
            guard timeRange.contains(cursor.key) else { throw malformed }
        }
        if order == .reports {
            guard cursor.reportID != nil, cursor.from == nil, cursor.to == nil, cursor.snapshot == nil else { throw malformed }
        } else {
            guard cursor.reportID == nil, let from = cursor.from, let to = cursor.to,
                timeRange.contains(from), timeRange.contains(to)
            else { throw malformed }
            if let snapshot = cursor.snapshot, snapshot <= 0 { throw malformed }
            _ = try cursor.window
        }
        return cursor
    }

    private static let base64URL = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func micros(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) }
    static func date(_ micros: Int64) -> Date { Date(timeIntervalSince1970: Double(micros) / 1_000_000) }
}
