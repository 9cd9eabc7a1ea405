import Logging
import ServiceLifecycle
import UnixSignals

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Bounds a graceful shutdown: once SIGTERM or SIGINT arrives, the process exits at the latest
/// `grace` later, even if a request or a service is still waiting on something that never
/// answers (seen in the fault suite: a request still waiting more than 60 s after a
/// PostgreSQL restart).
///
/// Exiting then loses nothing acknowledged: a report is acknowledged only after its commit,
/// so a request still in flight was not answered and its client retries (the `report_ids`
/// ledger makes the retry count once). The group shuts this service down last (it is the
/// first service), so on a shutdown that drains in time it is cancelled and does nothing.
struct ShutdownDeadline: Service {
    let grace: Duration
    let logger: Logger

    func run() async {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        // Cancelled (its turn in the shutdown, or the group ending): returns quietly.
        await cancelWhenGracefulShutdown {
            for await signal in signals {
                logger.notice("shutdown started", metadata: ["signal": "\(signal)", "deadline.seconds": "\(grace.components.seconds)"])
                try? await Task.sleep(for: grace)
                guard !Task.isCancelled else { return }
                logger.error(
                    "graceful shutdown still waiting after its deadline; exiting (unanswered requests were not acknowledged)",
                    metadata: ["deadline.seconds": "\(grace.components.seconds)"])
                exit(0)
            }
        }
    }
}
