import CArgon2
import Foundation

/// Passwords as Argon2id strings (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`), through the
/// reference implementation (Debian's `libargon2-dev`). Argon2id is the password hash OWASP
/// and RFC 9106 recommend first: memory-hard, so guessing on GPUs costs what the memory
/// costs; bcrypt would cut passwords at 72 bytes. The parameters are OWASP's minimum for
/// Argon2id (19 MiB, 2 passes, 1 lane), and the encoded string carries them, so raising them
/// later keeps old hashes verifiable.
enum PasswordHasher {
    /// The accepted password lengths, in UTF-8 bytes (accounts.md).
    static let bytes = 12...1024

    static let passes: UInt32 = 2
    static let memoryKiB: UInt32 = 19 * 1024
    static let lanes: UInt32 = 1
    static let saltBytes = 16
    static let hashBytes = 32

    /// Whether `password` has an accepted length, and the reason when not.
    static func problem(_ password: String) -> String? {
        let count = password.utf8.count
        if count < bytes.lowerBound { return "password: at least \(bytes.lowerBound) bytes" }
        if count > bytes.upperBound { return "password: at most \(bytes.upperBound) bytes" }
        return nil
    }

    /// The Argon2id string of `password` with a fresh random salt.
    static func hash(_ password: String) throws -> String {
        var rng = SystemRandomNumberGenerator()
        let salt = (0..<saltBytes).map { _ in UInt8.random(in: .min ... .max, using: &rng) }
        let length = argon2_encodedlen(passes, memoryKiB, lanes, UInt32(saltBytes), UInt32(hashBytes), Argon2_id)
        var encoded = [CChar](repeating: 0, count: length)
        let pwd = Array(password.utf8)
        let status = argon2id_hash_encoded(
            passes, memoryKiB, lanes, pwd, pwd.count, salt, salt.count, hashBytes, &encoded, encoded.count)
        guard status == ARGON2_OK.rawValue else { throw PasswordHashError(status: status) }
        return String(decoding: encoded.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether `password` matches the Argon2id string `encoded` (libargon2 compares the hashes
    /// in constant time).
    static func verify(_ password: String, encoded: String) -> Bool {
        let pwd = Array(password.utf8)
        return encoded.withCString { argon2id_verify($0, pwd, pwd.count) } == ARGON2_OK.rawValue
    }

    /// A hash no password matches, verified when the account does not exist so that an
    /// unknown e-mail takes as long to refuse as a wrong password.
    static let decoy: String = (try? hash("decoy password, never set")) ?? ""
}

/// libargon2 failed to hash (out of memory, a bad parameter).
struct PasswordHashError: Error, CustomStringConvertible {
    let status: Int32
    var description: String { String(cString: argon2_error_message(status)) }
}
