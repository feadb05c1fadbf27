#if canImport(Glibc)
import Glibc
#endif
import ServiceLifecycle

/// Lets go of the code pages start-up touched, once the server is ready. Start-up runs much code serving never
/// runs again (argument parsing, migrations, template compilation, the demo account), and the kernel maps 64 KB
/// around every page it faults in: an idle Foyer had 40 of its 50 MB resident in executable mappings, of which
/// serving every kind of request touches about 15 (measured with `/proc/PID/clear_refs` and `Referenced:` in
/// smaps). Unmapping them (`MADV_DONTNEED` on the read-only, executable file mappings, which nothing ever writes)
/// leaves the files' pages in the page cache: what serving needs comes back on its first use as a minor fault,
/// and the rest can be reclaimed. Writable or relocated mappings are never touched.
struct StartupCodePages: Service {
    let readiness: Readiness

    func run() async throws {
        while !readiness.isReady {
            guard (try? await Task.sleep(for: .milliseconds(50))) != nil else { return }
        }
        Self.release()
        // A service that returns stops the application: stay until it stops.
        try? await gracefulShutdown()
    }

    /// Unmaps this process's executable file pages; returns how many bytes of mappings it asked to unmap.
    @discardableResult
    static func release() -> Int {
        #if os(Linux)
        guard let maps = try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8) else { return 0 }
        var released = 0
        for line in maps.split(separator: "\n") {
            // start-end perms offset device inode path
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[1] == "r-xp", fields[5].hasPrefix("/") else { continue }
            let bounds = fields[0].split(separator: "-")
            guard bounds.count == 2, let start = UInt(bounds[0], radix: 16), let end = UInt(bounds[1], radix: 16), end > start,
                madvise(UnsafeMutableRawPointer(bitPattern: start), Int(end - start), MADV_DONTNEED) == 0
            else { continue }
            released += Int(end - start)
        }
        return released
        #else
        return 0
        #endif
    }
}
