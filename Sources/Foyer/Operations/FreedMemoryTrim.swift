#if canImport(Glibc)
import FoyerServer
import Glibc
#endif
import Logging
import ServiceLifecycle

/// Gives the system back the memory a burst of connections freed. glibc returns a heap's memory only from its top,
/// and thousands of connections spread their buffers and task stacks over many arenas: once they close, most of
/// that memory is free but stays resident (eight rounds of 5,000 event streams opened and closed left 578 MB with
/// nothing open, and `malloc_trim(0)` gave back 492 MB of it). So when the open connections have fallen well below
/// their peak since the last look, every arena is trimmed, once. Serving a steady load never trims.
struct FreedMemoryTrim: Service {
    let connections: EdgeConnections
    let logger: Logger
    /// How often the open count is compared with its peak.
    static let interval = Duration.seconds(2)
    /// Fewer closed connections than this free too little to be worth a trim.
    static let minimumFall = 256

    func run() async {
        Self.fixThresholds()
        await cancelWhenGracefulShutdown {
            // Trimmed one look after the burst is seen over: a closed connection is counted out before its task
            // and buffers are freed, and a trim at once found nothing to give back.
            var ended: (peak: Int, open: Int)?
            while (try? await Task.sleep(for: Self.interval)) != nil {
                if let (peak, open) = ended {
                    let before = Self.residentBytes()
                    let took = ContinuousClock().measure { Self.trim() }
                    logger.info("Gave freed memory back to the system", metadata: [
                        "connections_peak": "\(peak)", "connections_open": "\(open)",
                        "resident_mb_before": "\(before >> 20)", "resident_mb_after": "\(Self.residentBytes() >> 20)",
                        "trim_ms": "\(took.components.seconds * 1_000 + took.components.attoseconds / 1_000_000_000_000_000)",
                    ])
                }
                let (peak, open) = connections.takePeak()
                ended = Self.isBurstOver(peak: peak, open: open) ? (peak, open) : nil
            }
        }
    }

    /// At least `minimumFall` connections gone, and at most half of the peak still open.
    static func isBurstOver(peak: Int, open: Int) -> Bool {
        peak - open >= minimumFall && open <= peak / 2
    }

    /// glibc's `malloc_trim(0)`: every arena, free pages inside heaps too. Looked up at run time: Swift's Glibc
    /// module does not export `<malloc.h>`.
    static func trim() {
        #if canImport(Glibc)
        if let mallocTrim { _ = mallocTrim(0) }
        #endif
    }

    /// Blocks of 1 MiB and more (uploads, decoded pictures, large bodies) from their own mappings, given back to the
    /// kernel when freed. glibc raises its mmap threshold after such a block is freed, so the next ones come from the
    /// heap and stay resident (RSS grew by 160 MB over ten picture uploads and never fell); a fixed threshold stops
    /// that. Fixing it also fixes the trim threshold at glibc's default of 128 KB, which a heap's top crosses back
    /// and forth under steady load: every page given back is faulted in again at the next request (4 faults and
    /// about 3 µs of a rendered list's 60), so it is set to twice the mmap threshold, as glibc's own moving rule
    /// would, and bursts are given back by the trim above. `mallopt`, looked up like `malloc_trim`.
    static func fixThresholds() {
        #if canImport(Glibc)
        let trimThreshold: Int32 = -1, mmapThreshold: Int32 = -3  // M_TRIM_THRESHOLD, M_MMAP_THRESHOLD in <malloc.h>
        if let mallopt {
            _ = mallopt(mmapThreshold, 1 << 20)
            _ = mallopt(trimThreshold, 2 << 20)
        }
        #endif
    }

    #if canImport(Glibc)
    private static let mallopt: (@convention(c) (Int32, Int32) -> Int32)? = dlsym(nil, "mallopt").map {
        unsafeBitCast($0, to: (@convention(c) (Int32, Int32) -> Int32).self)
    }

    private static let mallocTrim: (@convention(c) (Int) -> Int32)? = dlsym(nil, "malloc_trim").map {
        unsafeBitCast($0, to: (@convention(c) (Int) -> Int32).self)
    }
    #endif

    /// This process's resident memory (`/proc/self/statm`), 0 where there is none.
    static func residentBytes() -> Int {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
