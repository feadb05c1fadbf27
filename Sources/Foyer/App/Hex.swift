import Crypto
import Foundation

extension Sequence<UInt8> {
    /// Lowercase hex. `String(format: "%02x")` per byte cost ~30 µs for a SHA-256 on every authenticated request.
    var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var characters: [UInt8] = []
        characters.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            characters.append(digits[Int(byte >> 4)])
            characters.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: characters, as: UTF8.self)
    }
}

extension String {
    /// The SHA-256 of the text's UTF-8, in lowercase hex: session tokens kept hashed, Apollo's document hashes,
    /// hashed nonces, cache keys.
    var sha256Hex: String { SHA256.hash(data: Data(utf8)).hexString }
}
