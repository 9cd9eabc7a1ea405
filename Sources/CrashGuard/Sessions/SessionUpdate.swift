import Foundation

/// One session update as `POST /v1/sessions` takes it (release-health.md, "Session updates"):
/// the session's whole state at one moment. A retry resends the same `sid` and `seq`, which
/// the server answers as a duplicate.
struct SessionUpdate: Codable, Equatable, Sendable {
    /// How the session stands: `ok` while it runs, then one final status.
    enum Status: String, Codable, Sendable {
        case ok, exited, crashed, abnormal, errored
    }

    /// `release` = `<app.id>@<app.version>`; `environment` omitted means `production`.
    struct Attributes: Codable, Equatable, Sendable {
        var release: String
        var environment: String?
    }

    var sid: UUID
    /// The install id.
    var did: String?
    /// The session's logical clock: 0 for the first update, one more for each later one.
    var seq: Int64
    var isInit: Bool
    var started: Date
    var timestamp: Date
    /// Seconds from `started` to the end, on a final update whose end was observed.
    var duration: Double?
    var status: Status
    /// Errors the guards recorded in the session.
    var errors: Int
    var attrs: Attributes

    private enum CodingKeys: String, CodingKey {
        case sid, did, seq, started, timestamp, duration, status, errors, attrs
        case isInit = "init"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(sid.uuidString.lowercased(), forKey: .sid)
        try container.encodeIfPresent(did, forKey: .did)
        try container.encode(seq, forKey: .seq)
        try container.encode(isInit, forKey: .isInit)
        try container.encode(started, forKey: .started)
        try container.encode(timestamp, forKey: .timestamp)
        try container.encodeIfPresent(duration, forKey: .duration)
        try container.encode(status, forKey: .status)
        try container.encode(errors, forKey: .errors)
        try container.encode(attrs, forKey: .attrs)
    }
}
