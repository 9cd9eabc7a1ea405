import Crypto
import Foundation

/// A project's newly minted keys, shown once by `project create` / `project rotate`.
public struct ProjectCredentials: Codable, Sendable {
    /// The project slug.
    public var project: String
    /// Public key for `X-Crash-Key`; may only send reports. Also the public key of the
    /// project's Sentry DSN.
    public var ingestKey: String
    /// Secret bearer token; may only query and triage.
    public var readToken: String
    /// The project's numeric id in Sentry DSNs and `/api/{sentryId}/...` paths.
    public var sentryId: Int64

    /// The DSN a Sentry SDK is configured with to report into this project.
    public func sentryDSN(publicURL: String) -> String {
        SentryDSN.format(publicURL: publicURL, key: ingestKey, sentryID: sentryId)
    }

    /// The JSON the command line prints: the fields above plus `sentryDsn`.
    public func json(publicURL: String = ServerConfiguration.defaultPublicURL) throws -> String {
        struct Printed: Encodable {
            var project: String
            var ingestKey: String
            var readToken: String
            var sentryId: Int64
            var sentryDsn: String
        }
        let printed = Printed(
            project: project, ingestKey: ingestKey, readToken: readToken, sentryId: sentryId,
            sentryDsn: sentryDSN(publicURL: publicURL))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(printed), as: UTF8.self)
    }
}

/// Which keys `project rotate` replaces.
public enum KeyRotation: String, Sendable, CustomStringConvertible {
    /// Both keys (`project rotate NAME`).
    case both
    /// Only the read token (`--read-token`): a leaked token is revoked, shipped apps keep reporting.
    case readToken
    /// Only the ingest key (`--ingest-key`): scripts and the dashboard keep their read token.
    case ingestKey

    var rotatesIngestKey: Bool { self != .readToken }
    var rotatesReadToken: Bool { self != .ingestKey }

    public var description: String { rawValue }
}

/// What `project rotate` prints: the keys it minted, shown once; the key it kept is nil (only
/// its hash is stored).
public struct RotatedCredentials: Sendable {
    /// The project slug.
    public var project: String
    /// The new ingest key, or nil when it was kept.
    public var ingestKey: String?
    /// The new read token, or nil when it was kept.
    public var readToken: String?
    /// The project's numeric id in Sentry DSNs.
    public var sentryId: Int64

    /// The JSON of `project create`, with the kept key `null`. `sentryDsn` is ready to use
    /// when the ingest key is new; when it was kept, the DSN has the placeholder `<ingestKey>`
    /// where the key goes, as `project list` prints it.
    public func json(publicURL: String = ServerConfiguration.defaultPublicURL) throws -> String {
        struct Printed: Encodable {
            var project: String
            var ingestKey: String?
            var readToken: String?
            var sentryId: Int64
            var sentryDsn: String

            enum CodingKeys: String, CodingKey { case project, ingestKey, readToken, sentryId, sentryDsn }

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(project, forKey: .project)
                try container.encode(ingestKey, forKey: .ingestKey)  // null, not absent
                try container.encode(readToken, forKey: .readToken)
                try container.encode(sentryId, forKey: .sentryId)
                try container.encode(sentryDsn, forKey: .sentryDsn)
            }
        }
        let printed = Printed(
            project: project, ingestKey: ingestKey, readToken: readToken, sentryId: sentryId,
            sentryDsn: SentryDSN.format(publicURL: publicURL, key: ingestKey ?? SentryDSN.keyPlaceholder, sentryID: sentryId))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(printed), as: UTF8.self)
    }
}

/// Key generation and hashing. Keys carry 256 random bits from the system CSPRNG and
/// are stored only as SHA-256 (fast hashing suffices for random keys of this strength;
/// lookups go by hash, so comparison time leaks nothing about a stored key).
enum ProjectKeys {
    static let ingestPrefix = "cgi_"
    static let readPrefix = "cgr_"

    /// A fresh key with a recognizable prefix, 256 bits, base64url without padding.
    static func generate(prefix: String) -> String {
        var rng = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &rng) }
        let b64 = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return prefix + b64
    }

    /// SHA-256 of the key's UTF-8 bytes.
    static func hash(_ key: String) -> Data {
        Data(digest(key))
    }

    /// SHA-256 of the key's UTF-8 bytes, as the digest: hashed in place, and no heap storage.
    static func digest(_ key: String) -> SHA256Digest {
        var key = key
        return key.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
    }

    /// `true` for a valid project slug: `[a-z0-9][a-z0-9-]{0,63}`.
    static func isValidSlug(_ slug: String) -> Bool {
        let bytes = Array(slug.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        for (i, b) in bytes.enumerated() {
            let alnum = (b >= 97 && b <= 122) || (b >= 48 && b <= 57)
            guard alnum || (i > 0 && b == UInt8(ascii: "-")) else { return false }
        }
        return true
    }
}
