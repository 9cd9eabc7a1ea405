import Foundation

/// Where the running session's state is kept between launches: the tracker's file-system
/// seam (tests inject ``InMemorySessionStorage``).
protocol SessionStorage: Sendable {
    /// The stored state, or `nil` when there is none (or it cannot be read).
    func load() -> SessionState?
    /// Replaces the stored state so that a crash leaves the old one or the new one, never a
    /// torn file, and a power loss keeps the new one.
    func save(_ state: SessionState)
    /// Forgets the stored state (the session ended and its final update is queued).
    func remove()
}

/// The live session as the next launch needs it: enough to send its final update.
struct SessionState: Codable, Equatable, Sendable {
    var sid: UUID
    var did: String?
    var started: Date
    var release: String
    var environment: String?
    /// The `seq` of the last update queued for it.
    var seq: Int64
    /// Errors recorded so far (written when the first one happens, not on each).
    var errors: Int
}

/// `<directory>/sessions/current`, written to a temporary file, fsynced and renamed.
struct FileSessionStorage: SessionStorage {
    let url: URL

    init(directory: URL) {
        url = directory.appendingPathComponent("sessions", isDirectory: true).appendingPathComponent("current")
    }

    func load() -> SessionState? {
        guard let data = try? Data(contentsOf: url) else { return nil }
        return try? JSONDecoder.crashWire().decode(SessionState.self, from: data)
    }

    func save(_ state: SessionState) {
        guard let data = try? JSONEncoder.crashWire().encode(state) else { return }
        try? writeFileAtomically(data, to: url)
    }

    func remove() { try? FileManager.default.removeItem(at: url) }
}
