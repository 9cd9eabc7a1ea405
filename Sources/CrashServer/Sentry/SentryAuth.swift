import HTTPTypes

/// Where a Sentry SDK puts its public key: the `X-Sentry-Auth` header (or `Authorization`
/// with the `Sentry` scheme), `Sentry sentry_key=<key>, sentry_version=7, ...`; else the
/// `sentry_key` query parameter (browsers, which cannot set headers without a preflight);
/// else the envelope header's `dsn`, read by the controller.
enum SentryAuth {
    static let authHeader = HTTPField.Name("X-Sentry-Auth")!

    /// The key from the headers or the query, or nil when neither names one.
    static func key(headers: HTTPFields, query: String?) -> String? {
        for value in headers[values: authHeader] + headers[values: .authorization] {
            if let key = key(authorization: value) { return key }
        }
        return query.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// `sentry_key` of one `Sentry k=v, k=v` header value.
    static func key(authorization value: String) -> String? {
        var text = Substring(value).drop(while: { $0 == " " })
        guard text.lowercased().hasPrefix("sentry ") || text.lowercased().hasPrefix("sentry_") else { return nil }
        if text.lowercased().hasPrefix("sentry ") { text = text.dropFirst("sentry ".count) }
        for pair in text.split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingWhitespace() == "sentry_key" else { continue }
            let key = parts[1].trimmingWhitespace()
            return key.isEmpty ? nil : key
        }
        return nil
    }
}
