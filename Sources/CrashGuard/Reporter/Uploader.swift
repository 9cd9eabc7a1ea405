import CrashCompression
import CrashWire
import Foundation

/// Drains the ``DiskQueue`` to `POST /v1/reports`, one batch at a time, oldest first.
///
/// A report leaves the queue only when the server answered 202 (accepted, duplicate or
/// rejected as invalid: a resend could never succeed) or 200/204 (a success without the
/// contract's body, e.g. from a proxy), or when a single report alone is refused with
/// 400/413. A batch is leased from the queue while it is in flight, so no other upload
/// sends it and eviction never drops it.
///
/// 429, 503, 5xx, 408 and network errors are retried with exponential backoff and full
/// jitter, honouring `Retry-After`. Only 401 (the key is missing or unknown) stops
/// uploading for this process, logged once, with the queue kept for a later start. The
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
        self.ingestKey = ingestKey
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
        while !stopped, !Task.isCancelled {
            let batch = queue.lease(limit: singleReports ? 1 : batchSize, maxBytes: maxBatchBytes)
            if batch.isEmpty { return }
            let outcome = await send(batch)
            switch outcome {
            case .sent:
                // One at a time goes on until the report that kept failing is dealt with.
                attempt = 0
                failures = 0
            case .stop:
                queue.release(batch)
                stopped = true
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
                do { try await clock.sleep(for: delay) } catch { return }
            }
        }
    }

    /// One `POST` of `batch`, splitting it on 400/413.
    func send(_ batch: [DiskQueue.Entry]) async -> Outcome {
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

        let request: UploadRequest
        do {
            let json = try JSONEncoder.crashWire().encode(ReportBatch(reports: reports))
            let body = try Deflater.compress(Array(json), format: .gzip)
            request = UploadRequest(
                url: endpoint,
                headers: [
                    WireProtocol.ingestKeyHeader: ingestKey,
                    "Content-Type": WireProtocol.mediaType,
                    "Content-Encoding": "gzip",
                ],
                body: Data(body)
            )
        } catch {
            log("could not encode a batch: \(error)")
            return .retry(after: nil, counts: true)
        }

        let response: UploadResponse
        do {
            response = try await transport.send(request)
        } catch {
            return .retry(after: nil, counts: false)
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
        case 401:
            logStopOnce("server answered 401: the ingest key is missing or unknown; uploads stop until the next start, reports stay queued")
            return .stop
        case 429, 503:
            return .retry(after: Backoff.parseRetryAfter(response.headers["retry-after"], now: clock.now), counts: false)
        case 408, 500...599:
            return .retry(after: Backoff.parseRetryAfter(response.headers["retry-after"], now: clock.now), counts: true)
        default:
            // 403, 404 and the like: not the contract's server answering (see the type's doc).
            if loggedStatuses.insert(response.status).inserted {
                log(
                    "server answered \(response.status), which /v1/reports never does (a proxy or a wrong serverURL?); retrying with backoff, reports stay queued"
                )
            }
            return .retry(after: Backoff.parseRetryAfter(response.headers["retry-after"], now: clock.now), counts: false)
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
