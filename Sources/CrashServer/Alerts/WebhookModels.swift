import CrashWire
import Foundation

/// What a webhook can be told about.
enum WebhookEvent: String, CaseIterable, Sendable {
    /// A group's first report.
    case groupNew = "group.new"
    /// A resolved group got a report it counts as a regression.
    case groupRegressed = "group.regressed"
    /// A group's last hour is at least 10 reports and 5 times its hourly average.
    case groupSpike = "group.spike"
    /// A snoozed group's condition was met and it became open by itself (triage.md, "Snooze").
    case groupReappeared = "group.reappeared"
}

/// How a delivery's body looks.
enum WebhookFormat: String, CaseIterable, Sendable {
    /// `{"event", "project", "group", "deliveredAt"}`.
    case json
    /// `{"text": ...}`: Slack's, Mattermost's and Discord's (`/slack`) incoming webhooks.
    case slack
}

/// A validated `POST /v1/projects/{project}/webhooks` body.
struct WebhookRequest: Sendable, Equatable {
    static let maxURLBytes = 2048
    /// Most webhooks one project may have.
    static let maxPerProject = 50

    var url: String
    var events: [WebhookEvent]
    var format: WebhookFormat

    /// Parses and checks a body; every error is a 400 whose message starts with the field.
    /// `allowList` lets receivers on refused hosts through (``checkURL(_:allowList:)``).
    static func parse(_ bytes: [UInt8], allowList: WebhookAllowList = WebhookAllowList()) throws -> WebhookRequest {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            throw APIError.badRequest(
                #"body: must be a JSON object like {"url": "https://...", "events": ["group.new"], "format": "json"}"#)
        }
        guard let url = object["url"] as? String else { throw APIError.badRequest("url: required, a string") }
        try checkURL(url, allowList: allowList)
        guard let list = object["events"] as? [Any] else {
            throw APIError.badRequest("events: required, an array of \(eventNames) (empty: only what alert rules send it)")
        }
        var events: [WebhookEvent] = []
        for item in list {
            guard let name = item as? String, let event = WebhookEvent(rawValue: name) else {
                throw APIError.badRequest("events: unknown event \(describe(item)); use \(eventNames)")
            }
            if !events.contains(event) { events.append(event) }
        }
        var format = WebhookFormat.json
        if let value = object["format"], !(value is NSNull) {
            guard let name = value as? String, let parsed = WebhookFormat(rawValue: name) else {
                throw APIError.badRequest("format: unknown format \(describe(value)); use json or slack")
            }
            format = parsed
        }
        return WebhookRequest(url: url, events: events, format: format)
    }

    /// An absolute `http` or `https` URL with a host, no user info, at most 2048 bytes, whose
    /// host is not refused by its form (``WebhookTarget/parse(_:)``: an address in a refused
    /// range, `localhost`, a number not written as dotted-quad) unless `allowList` lists it.
    /// Names are checked again, with their addresses, at every delivery.
    static func checkURL(_ text: String, allowList: WebhookAllowList = WebhookAllowList()) throws {
        guard text.utf8.count <= maxURLBytes else { throw APIError.badRequest("url: longer than \(maxURLBytes) bytes") }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https"
        else { throw APIError.badRequest("url: must be an absolute http:// or https:// URL") }
        guard let host = components.host, !host.isEmpty else { throw APIError.badRequest("url: has no host") }
        guard components.user == nil, components.password == nil else {
            throw APIError.badRequest("url: must not carry a user name or password")
        }
        guard !allowList.allows(text) else { return }
        do {
            _ = try WebhookTarget.parse(text)
        } catch {
            throw APIError.badRequest("url: \(error.description)")
        }
    }

    private static var eventNames: String { WebhookEvent.allCases.map(\.rawValue).joined(separator: ", ") }

    private static func describe(_ value: Any) -> String {
        if let text = value as? String { return "'\(text.prefix(64))'" }
        return "of type \(type(of: value))"
    }
}

/// A webhook as `GET` lists it (never with its secret).
struct WebhookBody: Codable, Sendable, Equatable {
    /// The last delivery attempt of any of its events.
    struct LastDelivery: Codable, Sendable, Equatable {
        /// `X-CrashGuard-Delivery`.
        var id: String
        var event: String
        /// `delivered`, `retrying` (a failed attempt, another is due) or `failed` (given up).
        var status: String
        /// When the last attempt was made.
        var at: Date
        var attempts: Int
        /// The receiver's HTTP status, null when it did not answer.
        @NullWhenAbsent var httpStatus: Int?
        /// Why the last attempt failed, null when delivered.
        @NullWhenAbsent var error: String?
    }

    var id: String
    var url: String
    var events: [String]
    var format: String
    var createdAt: Date
    /// Null until something was sent.
    @NullWhenAbsent var lastDelivery: LastDelivery?
}

/// `POST` answers the webhook plus its secret, this once.
struct CreatedWebhookBody: Encodable, Sendable {
    var id: String
    var url: String
    var events: [String]
    var format: String
    var createdAt: Date
    /// The HMAC-SHA256 key of `X-CrashGuard-Signature`; never shown again.
    var secret: String
}

struct WebhookListBody: Codable, Sendable {
    var webhooks: [WebhookBody]
}
