import Foundation

/// What the uploader remembers across launches (`<queue>/upload-state`), so a restarted app
/// neither hammers a server that asked it to wait nor retries a key the server refused:
/// when the next upload may start (backoff or `Retry-After`), how many attempts in a row
/// failed (the backoff's exponent), and a 401 with the key it was for.
struct UploadState: Codable, Equatable, Sendable {
    /// No upload starts before this wall-clock time.
    var notBefore: Date?
    /// Failed attempts in a row.
    var attempt = 0
    /// The endpoint and key (``fingerprint(endpoint:key:)``) that got a 401, and when.
    var unauthorized: Unauthorized?

    struct Unauthorized: Codable, Equatable, Sendable {
        var fingerprint: String
        var at: Date
    }

    static let fileName = "upload-state"
    /// How long a 401 for a key keeps uploads with that key off (a key is refused because it
    /// was rotated or deleted; a day later one batch tries again, in case the server erred).
    static let unauthorizedPause: TimeInterval = 24 * 3600

    var isEmpty: Bool { notBefore == nil && attempt == 0 && unauthorized == nil }

    /// The state stored in `directory`, or an empty one.
    static func load(from directory: URL) -> UploadState {
        guard let data = try? Data(contentsOf: directory.appendingPathComponent(fileName)),
            let state = try? JSONDecoder().decode(UploadState.self, from: data)
        else { return UploadState() }
        return state
    }

    /// Stores the state in `directory` (atomically, without fsync: losing it to a power cut
    /// costs one early retry); an empty state removes the file.
    func save(to directory: URL) {
        let url = directory.appendingPathComponent(Self.fileName)
        if isEmpty {
            try? FileManager.default.removeItem(at: url)
        } else if let data = try? JSONEncoder().encode(self) {
            _ = writeFileAtomically(data, to: url, fsync: false)
        }
    }

    /// Names an endpoint and key without storing the key (FNV-1a, 64 bits).
    static func fingerprint(endpoint: URL, key: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in (endpoint.absoluteString + " " + key).utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }
}
