import CrashCompression
import CrashWire
import Foundation

/// Drains the ``DiskQueue`` to `POST /v1/reports` and `POST /v1/sessions`, one batch at a
/// time: the kept store (fatal reports, session updates) first, then guard reports, oldest
/// first within each.
///
/// A report leaves the queue only when the server answered 202 (accepted, duplicate or
/// rejected as invalid: a resend could never succeed) or 200/204 (a success without the
/// contract's body, e.g. from a proxy), or when a single report alone is refused with
/// 400/413. A batch is leased from the queue while it is in flight, so no other upload
/// sends it and eviction never drops it.
///
/// 429, 503, 5xx, 408 and network errors are retried with exponential backoff and full
/// jitter, honouring `Retry-After`. Only 401 (the key is missing or unknown) stops
/// uploading, logged once, with the queue kept for a start with another key. The
/// contract never answers `/v1/reports` with 403 or 404: such an answer comes from
/// something in between (a proxy, a wrong `serverURL`), so it is logged once and retried
/// with backoff like a network error, the queue kept.
///
/// **Retry cap.** Answers that may be the batch's own fault (500, 502, 504, other 5xx
/// but 503, 408) count as failed attempts; after ``maxAttempts`` in a row the batch is sent
/// one report at a time, and a single report that reaches the cap again is moved to the
/// dead letters (``DiskQueue/deadLetter(_:)``) and counted; the count travels like the
/// drop count, as `context["crashguard.deadLettered"]`. Network errors, 429 and 503 never
/// count: they say nothing about the batch. A 400 or 413 batch is split in halves until the
/// offender is alone. Drains never overlap: a second caller waits for the running one, then
/// drains whatever is left.
///
/// **Across launches** (``UploadState``): the time before which no upload starts (the
/// backoff's delay or `Retry-After`), the failed-attempt count and a 401 are kept in the
/// queue directory, so a restarted app waits out the delay the last run chose, and a key
/// that got a 401 is not tried again for ``UploadState/unauthorizedPause`` (a different key
/// uploads at once).
actor Uploader {
    /// What one upload attempt asks the drain loop to do next.
    enum Outcome: Equatable {
        case sent
        /// Retry later; `counts`: the answer may be the batch's own fault (retry cap).
        case retry(after: Duration?, counts: Bool)
        case stop
    }

    let queue: DiskQueue
    let transport: any ReportTransport
    let clock: any ReporterClock
    let endpoint: URL
    /// `POST /v1/sessions`, beside ``endpoint``.
    let sessionsEndpoint: URL
    let ingestKey: String
    let batchSize: Int
    /// Uncompressed bytes per batch, well under the server's 16 MiB decompressed cap.
    let maxBatchBytes: Int
    let backoff: Backoff
    let log: @Sendable (String) -> Void
    /// Failed attempts (see the type's documentation) before a batch is split, then dead-lettered.
    let maxAttempts: Int

    /// Set by a 401 (or an unexpected status): no more uploads in this process.
    private(set) var stopped = false
    private var attempt = 0
    /// Attempts that count toward the cap for the current head of the queue.
    private var failures = 0
    /// Send one report per batch until the one that keeps failing is dead-lettered.
    private var singleReports = false
    private var loggedStatuses: Set<Int> = []
    private var running: (id: Int, task: Task<Void, Never>)?
    private var nextRunID = 0
    private var loggedStop = false
    /// Persisted in the queue directory; see the type's documentation.
    private var state: UploadState
    private let keyFingerprint: String

    init(
        queue: DiskQueue,
        transport: any ReportTransport,
        clock: any ReporterClock,
        endpoint: URL,
        ingestKey: String,
        batchSize: Int,
        maxBatchBytes: Int = 4 << 20,
        backoff: Backoff = Backoff(),
        maxAttempts: Int = 8,
        log: @escaping @Sendable (String) -> Void
    ) {
        self.maxAttempts = max(maxAttempts, 1)
        self.queue = queue
        self.transport = transport
        self.clock = clock
        self.endpoint = endpoint
        self.sessionsEndpoint = endpoint.deletingLastPathComponent().appendingPathComponent("sessions")
        self.ingestKey = ingestKey
        self.state = UploadState.load(from: queue.directory)
        self.keyFingerprint = UploadState.fingerprint(endpoint: endpoint, key: ingestKey)
        self.attempt = state.attempt
        self.batchSize = min(max(batchSize, 1), WireProtocol.maxReportsPerBatch)
        self.maxBatchBytes = maxBatchBytes
        self.backoff = backoff
        self.log = log
    }

    /// Uploads until the queue is empty, uploading stopped, or the drain was cancelled.
    func drain() async {
        while let current = running {
            await current.task.value
            if running?.id == current.id { running = nil }
        }
        guard !stopped, queue.count > 0 else { return }
        // What was recorded before this drain was asked for is written first (the queue's
        // writer thread may still hold it), off the cooperative pool.
        await queue.syncOffPool()
        nextRunID += 1
        let id = nextRunID
        let task = Task { await self.drainLoop() }
        running = (id, task)
        await task.value
        if running?.id == id { running = nil }
    }

    /// Cancels a running drain (its backoff sleep ends at once).
    func cancel() { running?.task.cancel() }

    private func drainLoop() async {
        if let refused = state.unauthorized {
            let paused = clock.now.timeIntervalSince(refused.at) < UploadState.unauthorizedPause
            if refused.fingerprint == keyFingerprint, paused {
                logStopOnce(
                    "the server answered 401 for this ingest key at \(RFC3339.format(refused.at)); uploads stay off for a day, reports stay queued"
                )
                stopped = true
                return
            }
            // Another key uploads now; the refused key's pause is kept until it ends.
            if !paused { updateState { $0.unauthorized = nil } }
        }
        // A delay an earlier run (or drain) chose is waited out first, at most the longest
        // delay the backoff can choose (a clock set back must not park uploads).
        if let notBefore = state.notBefore, notBefore > clock.now {
            let wait = min(notBefore.timeIntervalSince(clock.now), max(backoff.maxRetryAfter, backoff.cap).seconds)
            do { try await clock.sleep(for: .milliseconds(Int64(wait * 1000))) } catch { return }
        }
        while !stopped, !Task.isCancelled {
            let batch = queue.lease(limit: singleReports ? 1 : batchSize, maxBytes: maxBatchBytes)
            if batch.isEmpty { return }
            let outcome = await send(batch)
            switch outcome {
            case .sent:
                // One at a time goes on until the report that kept failing is dealt with.
                attempt = 0
                failures = 0
                updateState {
                    $0.notBefore = nil
                    $0.attempt = 0
                }
            case .stop:
                queue.release(batch)
                stopped = true
                updateState { $0.unauthorized = .init(fingerprint: keyFingerprint, at: clock.now) }
                return
            case .retry(let retryAfter, let counts):
                if counts { failures += 1 }
                if failures >= maxAttempts {
                    failures = 0
                    if batch.count > 1 {
                        singleReports = true
                        log("a batch failed \(maxAttempts) times; sending its reports one at a time")
                    } else {
                        log("report \(batch[0].name) failed \(maxAttempts) times; moved to the dead letters")
                        queue.deadLetter(batch)
                        attempt = 0
                        singleReports = false
                        continue
                    }
                }
                queue.release(batch)
                let delay = backoff.delay(attempt: attempt, retryAfter: retryAfter)
                attempt += 1
                let attempts = attempt
                updateState {
                    $0.notBefore = clock.now.addingTimeInterval(delay.seconds)
                    $0.attempt = attempts
                }
                do { try await clock.sleep(for: delay) } catch { return }
            }
        }
    }

    /// Changes the persisted state, writing it only when it changed.
    private func updateState(_ change: (inout UploadState) -> Void) {
        var next = state
        change(&next)
        guard next != state else { return }
        state = next
        next.save(to: queue.directory)
    }

    /// One `POST` of `batch`, splitting it on 400/413.
    func send(_ batch: [DiskQueue.Entry]) async -> Outcome {
        if batch.first?.payload == .session { return await sendSessions(batch) }
        var entries: [DiskQueue.Entry] = []
        var reports: [Report] = []
        var unreadable: [DiskQueue.Entry] = []
        let decoder = JSONDecoder.crashWire()
        for entry in batch {
            if let data = queue.read(entry), let report = try? decoder.decode(Report.self, from: data) {
                entries.append(entry)
                reports.append(report)
            } else {
                unreadable.append(entry)
            }
        }
        if !unreadable.isEmpty {
            log("removed \(unreadable.count) unreadable queued report(s)")
            queue.remove(unreadable)
        }
        guard !reports.isEmpty else { return .sent }

        // The drop and dead-letter counts ride in the first report's context until a
        // success acknowledges them.
        let dropped = queue.dropped
        let deadLettered = queue.deadLettered
        var droppedSent = 0
        var deadLetteredSent = 0
        var context = reports[0].context ?? [:]
        if dropped > 0, context.count < ReportLimits.maxContextEntries || context[ContextKey.dropped] != nil {
            context[ContextKey.dropped] = String(dropped)
            droppedSent = dropped
        }
        if deadLettered > 0, context.count < ReportLimits.maxContextEntries || context[ContextKey.deadLettered] != nil {
            context[ContextKey.deadLettered] = String(deadLettered)
            deadLetteredSent = deadLettered
        }
        if droppedSent > 0 || deadLetteredSent > 0 { reports[0].context = context }

        let response: UploadResponse
        switch await post(to: endpoint, { try JSONEncoder.crashWire().encode(ReportBatch(reports: reports)) }) {
        case .answered(let answer): response = answer
        case .unanswered(let outcome): return outcome
        }

        switch response.status {
        case 200, 202, 204:
            if response.status == 202, let result = try? JSONDecoder().decode(IngestResponse.self, from: response.body) {
                for rejection in result.rejected where reports.indices.contains(rejection.index) {
                    log("server rejected report \(reports[rejection.index].id.uuidString.lowercased()): \(rejection.error)")
                }
            }
            queue.remove(entries)
            if droppedSent > 0 { queue.acknowledgeDropped(droppedSent) }
            if deadLetteredSent > 0 { queue.acknowledgeDeadLettered(deadLetteredSent) }
            return .sent
        case 400, 413:
            if entries.count > 1 {
                let middle = entries.count / 2
                let first = await send(Array(entries[..<middle]))
                guard first == .sent else { return first }
                return await send(Array(entries[middle...]))
            }
            log("server refused report \(reports[0].id.uuidString.lowercased()) (\(response.status)); removed it")
            queue.remove(entries)
            return .sent
        default:
            return failure(response, path: "/v1/reports")
        }
    }

    /// What one `POST` came to: an answer, or the outcome to return without one.
    private enum Posted {
        case answered(UploadResponse)
        case unanswered(Outcome)
    }

    /// Gzips the JSON `body` makes and POSTs it to `url` with the ingest key. A body that
    /// cannot be encoded counts toward the retry cap; no answer (a network error) does not.
    private func post(to url: URL, _ body: () throws -> Data) async -> Posted {
        let request: UploadRequest
        do {
            request = UploadRequest(
                url: url,
                headers: [
                    WireProtocol.ingestKeyHeader: ingestKey,
                    "Content-Type": WireProtocol.mediaType,
                    "Content-Encoding": "gzip",
                ],
                body: Data(try Deflater.compress(Array(try body()), format: .gzip)))
        } catch {
            log("could not encode a batch for \(url.path): \(error)")
            return .unanswered(.retry(after: nil, counts: true))
        }
        do {
            return .answered(try await transport.send(request))
        } catch {
            return .unanswered(.retry(after: nil, counts: false))
        }
    }

    /// The outcome of an answer that took nothing: 401 stops, the rest are retried.
    private func failure(_ response: UploadResponse, path: String) -> Outcome {
        let retryAfter = Backoff.parseRetryAfter(response.headers["retry-after"], now: clock.now)
        switch response.status {
        case 401:
            logStopOnce(
                "server answered 401: the ingest key is missing or unknown; uploads stop for a day or until a start with another key, reports stay queued"
            )
            return .stop
        case 429, 503:
            return .retry(after: retryAfter, counts: false)
        case 408, 500...599:
            return .retry(after: retryAfter, counts: true)
        default:
            // 403, 404 and the like: not the contract's server answering (see the type's doc).
            if loggedStatuses.insert(response.status).inserted {
                log(
                    "server answered \(response.status), which \(path) never does (a proxy or a wrong serverURL?); retrying with backoff, reports stay queued"
                )
            }
            return .retry(after: retryAfter, counts: false)
        }
    }

    /// One `POST /v1/sessions` of queued session updates. A 202 (each rejected update is
    /// logged: resending cannot fix it), 200 or 204 removes them; a 400 or 413 removes them
    /// too (updates are small and few: a refused batch would be refused again); the rest is
    /// as for reports.
    private func sendSessions(_ batch: [DiskQueue.Entry]) async -> Outcome {
        var entries: [DiskQueue.Entry] = []
        var updates: [Data] = []
        for entry in batch {
            if let data = queue.read(entry), (try? JSONSerialization.jsonObject(with: data)) is [String: Any] {
                entries.append(entry)
                updates.append(data)
            } else {
                queue.remove([entry])
            }
        }
        guard !updates.isEmpty else { return .sent }
        let json = Data("{\"sessions\":[".utf8) + Data(updates.joined(separator: Data(",".utf8))) + Data("]}".utf8)
        let response: UploadResponse
        switch await post(to: sessionsEndpoint, { json }) {
        case .answered(let answer): response = answer
        case .unanswered(let outcome): return outcome
        }
        switch response.status {
        case 200, 202, 204, 400, 413:
            if response.status == 202, let result = try? JSONDecoder().decode(IngestResponse.self, from: response.body) {
                for rejection in result.rejected { log("server rejected a session update: \(rejection.error)") }
            } else if response.status >= 400 {
                log("server refused \(entries.count) session update(s) (\(response.status)); removed them")
            }
            queue.remove(entries)
            return .sent
        default:
            return failure(response, path: "/v1/sessions")
        }
    }

    private func logStopOnce(_ message: String) {
        guard !loggedStop else { return }
        loggedStop = true
        log(message)
    }
}

/// Context keys the SDK itself writes.
enum ContextKey {
    /// Reports dropped from a full queue since the last acknowledged upload.
    static let dropped = "crashguard.dropped"
    /// Reports given up on after the retry cap since the last acknowledged upload.
    static let deadLettered = "crashguard.deadLettered"
}
