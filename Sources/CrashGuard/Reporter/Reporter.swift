import CrashWire
import Foundation

/// Turns what the guards and the crash handler record into wire reports: stamps app and
/// device, samples, runs the configuration's reporter block, writes each report to the
/// on-disk queue before anything else, and schedules uploads on size, timer and flush
/// (the shape of swift-otel's `OTelBatchLogRecordProcessor`, with a disk queue in place of
/// the in-memory deque so a report survives the crash that may follow it).
final class Reporter: GuardEventSink, @unchecked Sendable {
    let configuration: CrashGuard.Configuration
    /// The device stamped on reports, install id included.
    let device: DeviceInfo
    /// `nil` when uploading is off.
    let queue: DiskQueue?
    let uploader: Uploader?
    let clock: any ReporterClock
    /// Uniform in 0..<1, for sampling; injected for tests.
    let random: @Sendable () -> Double

    private let ticks: AsyncStream<Void>
    private let tick: AsyncStream<Void>.Continuation
    private let lock = NSLock()
    private var tasks: [Task<Void, Never>] = []
    private var shutDown = false

    init(
        configuration: CrashGuard.Configuration,
        device: DeviceInfo,
        clock: any ReporterClock = SystemReporterClock(),
        backoff: Backoff = Backoff(),
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) throws {
        self.configuration = configuration
        self.device = device
        self.clock = clock
        self.random = random
        if let environment = configuration.environment, let problem = Report.environmentError(environment) {
            configuration.log("the configured environment is ignored (\(problem)); reports and sessions say production")
        }
        (ticks, tick) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        if configuration.uploadEnabled {
            let queue = try DiskQueue.open(
                directory: configuration.directory.appendingPathComponent("queue", isDirectory: true),
                maxBytes: configuration.maxQueueBytes
            )
            self.queue = queue
            self.uploader = Uploader(
                queue: queue,
                transport: configuration.transport ?? URLSessionTransport(),
                clock: clock,
                endpoint: configuration.endpoint,
                ingestKey: configuration.ingestKey,
                batchSize: configuration.effectiveBatchSize,
                backoff: backoff,
                log: configuration.log
            )
        } else {
            self.queue = nil
            self.uploader = nil
        }
    }

    deinit { tick.finish() }

    // MARK: Recording

    /// A guard's catch: queued, and counted as an error of the running session.
    func record(_ event: GuardEvent) {
        if !event.fatal { SessionLifecycle.recordError(from: self) }
        submit(report(for: event))
    }

    /// A wire report for `event`, stamped with this app and device.
    func report(for event: GuardEvent) -> Report {
        Report(
            timestamp: event.timestamp,
            kind: event.kind,
            reason: event.reason,
            stack: event.stack.isEmpty ? nil : event.stack,
            fatal: event.fatal ? true : nil,
            app: configuration.app,
            device: device,
            context: event.context.isEmpty ? nil : event.context
        )
    }

    /// Samples, adds the scope (unless the report brings its own, as a crash record does),
    /// runs the reporter block and queues `report`. Returns `true` when it was queued (or
    /// handed to the block with uploading off), `false` when it was dropped.
    @discardableResult
    func submit(_ report: Report, applyingScope: Bool = true) -> Bool {
        var report = report
        if report.fatal != true, configuration.sampleRate < 1, random() >= max(configuration.sampleRate, 0) {
            return false
        }
        if applyingScope { report.context = Scope.shared.apply(to: report.context) }
        if report.environment == nil { report.environment = configuration.validEnvironment }
        if let block = configuration.reporter {
            guard let changed = block(report) else { return false }
            report = changed
        }
        guard let queue else { return true }
        report = report.clampedToLimits()
        if let problem = report.validationError(now: clock.now) {
            configuration.log("dropped a report the server would reject: \(problem)")
            return false
        }
        do {
            let data = try JSONEncoder.crashWire().encode(report)
            // Fatal reports are on disk before this returns (the process may be ending), in
            // the kept store that eviction never touches.
            let fatal = report.fatal == true
            guard queue.append(data, id: report.id, durable: fatal, store: fatal ? .kept : .evictable) else {
                configuration.log("dropped a report: the queue's hand-off is full")
                return false
            }
            if queue.count >= configuration.effectiveBatchSize { tick.yield() }
            return true
        } catch {
            configuration.log("could not queue a report: \(error)")
            return false
        }
    }

    /// Queues a session update in the kept store (`durable`: fsynced, on disk before this
    /// returns). Sessions bypass sampling and the reporter block: they are counts, not reports.
    func submitSession(_ update: SessionUpdate, durable: Bool) {
        guard let queue else { return }
        do {
            let data = try JSONEncoder.crashWire().encode(update)
            guard queue.append(data, id: UUID(), durable: durable, store: .kept, payload: .session) else {
                configuration.log("dropped a session update: the queue's hand-off or kept store is full")
                return
            }
            if queue.count >= configuration.effectiveBatchSize { tick.yield() }
        } catch {
            configuration.log("could not queue a session update: \(error)")
        }
    }

    // MARK: Uploading

    /// Starts the upload loop and the flush timer; uploads what an earlier run left queued.
    func startUploading() {
        guard let uploader, let queue, !lock.withLock({ shutDown }) else { return }
        let ticks = self.ticks
        let tick = self.tick
        let clock = self.clock
        let interval = configuration.flushInterval
        let loop = Task {
            for await _ in ticks {
                await uploader.drain()
            }
        }
        let timer = Task {
            while !Task.isCancelled {
                do { try await clock.sleep(for: interval) } catch { return }
                if queue.count > 0 { tick.yield() }
            }
        }
        lock.withLock { tasks += [loop, timer] }
        if queue.count > 0 { tick.yield() }
    }

    /// Stops the loop and timer at once and lets go of the queue; an upload in flight
    /// finishes in the background (its batch stays leased, so nobody sends it twice).
    /// Queued reports stay on disk for the next start. Idempotent.
    func shutdown() {
        let running = lock.withLock { () -> [Task<Void, Never>]? in
            guard !shutDown else { return nil }
            shutDown = true
            defer { tasks = [] }
            return tasks
        }
        guard let running else { return }
        tick.finish()
        for task in running { task.cancel() }
        if let uploader { Task { await uploader.cancel() } }
        queue?.relinquish()
    }

    /// ``shutdown()``, then waits for a running upload to end.
    func stop() async {
        shutdown()
        await uploader?.cancel()
    }

    /// Uploads everything queued, waiting at most `timeout` (wall-clock time). `true` when
    /// the queue is empty.
    func flush(timeout: Duration) async -> Bool {
        guard let uploader, let queue else { return true }
        // What the caller recorded is on disk first (the writer thread may still hold it).
        await queue.syncOffPool()
        if queue.count == 0 { return true }
        let once = ResumeOnce()
        let drain = Task {
            await uploader.drain()
            // Batches leased by an earlier reporter's upload still in flight (after a
            // restart) come back or go; wait for them, then drain what they left.
            while !Task.isCancelled, queue.count > 0, queue.leasedCount > 0, await !uploader.stopped {
                try? await Task.sleep(for: .milliseconds(20))
                await uploader.drain()
            }
            once.resume()
        }
        // Real time, not the injected clock: the caller is about to exit and means seconds.
        let timer = Task {
            try? await ContinuousClock().sleep(for: timeout)
            once.resume()
        }
        await withCheckedContinuation { once.set($0) }
        timer.cancel()
        _ = drain  // keeps draining in the background after a timeout
        return queue.count == 0
    }
}

/// Resumes a continuation exactly once, whichever racer comes first (even before it is set).
private final class ResumeOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Void, Never>?
    private var done = false

    func set(_ continuation: CheckedContinuation<Void, Never>) {
        let resumeNow = lock.withLock {
            if done { return true }
            self.continuation = continuation
            return false
        }
        if resumeNow { continuation.resume() }
    }

    func resume() {
        let continuation: CheckedContinuation<Void, Never>? = lock.withLock {
            guard !done else { return nil }
            done = true
            defer { self.continuation = nil }
            return self.continuation
        }
        continuation?.resume()
    }
}
