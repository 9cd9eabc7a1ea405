import Foundation

/// RFC 3339 date-times, parsed and printed by hand: fast, allocation-light and
/// independent of locale and platform formatters.
public enum RFC3339 {
    /// Parses `2026-11-21T10:00:00Z`, with optional fractional seconds and a numeric offset.
    public static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse(bytes: $0) }
    }

    /// Parses UTF-8 bytes; see ``parse(_:)``.
    public static func parse(bytes b: UnsafeBufferPointer<UInt8>) -> Date? {
        guard b.count >= 20 else { return nil }
        func digits(_ start: Int, _ count: Int) -> Int? {
            var v = 0
            for i in start..<(start + count) {
                let c = b[i]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int(c - 48)
            }
            return v
        }
        guard let year = digits(0, 4), b[4] == 45, let month = digits(5, 2), b[7] == 45,
            let day = digits(8, 2), b[10] == 84 || b[10] == 116 || b[10] == 32,
            let hour = digits(11, 2), b[13] == 58, let minute = digits(14, 2), b[16] == 58,
            let second = digits(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }
        var i = 19
        var fraction = 0.0
        if b[i] == 46 {  // '.'
            i += 1
            var scale = 0.1
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        guard i < b.count else { return nil }
        var offset = 0
        switch b[i] {
        case 90, 122:  // Z z
            i += 1
        case 43, 45:  // + -
            guard i + 6 == b.count, let oh = digits(i + 1, 2), b[i + 3] == 58, let om = digits(i + 4, 2),
                oh <= 23, om <= 59
            else { return nil }
            offset = (oh * 3600 + om * 60) * (b[i] == 45 ? -1 : 1)
            i += 6
        default:
            return nil
        }
        guard i == b.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + min(second, 59) - offset
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    /// Prints UTC with `Z`; fractional seconds (up to microseconds) only when present.
    public static func format(_ date: Date) -> String {
        let t = date.timeIntervalSince1970
        var whole = t.rounded(.down)
        var micros = Int(((t - whole) * 1_000_000).rounded())
        if micros >= 1_000_000 {
            whole += 1
            micros -= 1_000_000
        }
        let secs = Int(whole)
        let days = secs >= 0 ? secs / 86_400 : (secs - 86_399) / 86_400
        let rem = secs - days * 86_400
        let (y, m, d) = civilFromDays(days)
        var out = pad(y, 4) + "-" + pad(m, 2) + "-" + pad(d, 2) + "T"
        out += pad(rem / 3600, 2) + ":" + pad(rem % 3600 / 60, 2) + ":" + pad(rem % 60, 2)
        if micros > 0 {
            var frac = pad(micros, 6)
            while frac.hasSuffix("0") { frac.removeLast() }
            out += "." + frac
        }
        return out + "Z"
    }

    private static func pad(_ v: Int, _ width: Int) -> String {
        let s = String(v)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    private static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

extension JSONDecoder {
    /// A decoder for the wire format: RFC 3339 dates.
    public static func crashWire() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = RFC3339.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "not an RFC 3339 date-time")
            }
            return date
        }
        return decoder
    }
}

extension JSONEncoder {
    /// An encoder for the wire format: RFC 3339 dates in UTC.
    public static func crashWire() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.format(date))
        }
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }
}
