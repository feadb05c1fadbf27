/// WebP's RIFF container, for one job: taking out the metadata chunks (`EXIF`, `XMP `, `ICCP`) and their flags.
/// libvips 8.14 (Debian 12's) writes an EXIF chunk into every WebP even when told to strip metadata; the pixels
/// it holds are ours, but "no EXIF at all" means none.
enum WebPContainer {
    static let metadataChunks: Set<String> = ["EXIF", "XMP ", "ICCP"]
    /// VP8X's flag bits for an ICC profile, EXIF and XMP.
    static let metadataFlags: UInt8 = 0x20 | 0x08 | 0x04

    /// The same WebP without its metadata chunks; nil when `bytes` is not a well-formed WebP container.
    static func withoutMetadata(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count >= 12, bytes[0..<4].elementsEqual("RIFF".utf8), bytes[8..<12].elementsEqual("WEBP".utf8) else { return nil }
        var output: [UInt8] = Array(bytes[0..<12])
        output.reserveCapacity(bytes.count)
        var offset = 12
        while offset < bytes.count {
            guard offset + 8 <= bytes.count else { return nil }
            let fourCC = String(decoding: bytes[offset..<offset + 4], as: UTF8.self)
            let size = Int(bytes[offset + 4]) | Int(bytes[offset + 5]) << 8 | Int(bytes[offset + 6]) << 16 | Int(bytes[offset + 7]) << 24
            let end = offset + 8 + size + (size & 1)
            guard offset + 8 + size <= bytes.count else { return nil }
            if !metadataChunks.contains(fourCC) {
                let start = output.count
                output += bytes[offset..<min(end, bytes.count)]
                if size & 1 == 1, end > bytes.count { output.append(0) }
                if fourCC == "VP8X", size >= 1 { output[start + 8] &= ~metadataFlags }
            }
            offset = end
        }
        let riffSize = UInt32(output.count - 8)
        for index in 0..<4 { output[4 + index] = UInt8(truncatingIfNeeded: riffSize >> (8 * UInt32(index))) }
        return output
    }
}
