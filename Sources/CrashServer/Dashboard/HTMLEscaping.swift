import Mustache

/// HTML escaping per Unicode scalar, the dashboard's only escaper.
///
/// swift-mustache's own HTML escaping compares whole `Character`s (grapheme clusters), so a
/// `"` followed by a combining mark (U+0301) is one `Character` that is not `"` and passes
/// unescaped, while a browser's tokenizer sees the quote and ends the attribute there. This
/// one works on the UTF-8 bytes: `&`, `<`, `>`, `"` and `'` are ASCII, so each is one byte
/// wherever it occurs, whatever follows it, and each is replaced.
enum HTMLEscaping {
    /// The name the templates' `{{% CONTENT_TYPE: ... }}` pragma selects this escaper by.
    static let contentTypeName = "HTML_SCALARS"

    /// `text` with `&<>"'` replaced by entities, wherever they occur.
    static func escape(_ text: String) -> String {
        var text = text
        return text.withUTF8 { bytes in
            guard bytes.contains(where: needsEscaping) else { return String(decoding: bytes, as: UTF8.self) }
            var out: [UInt8] = []
            out.reserveCapacity(bytes.count + bytes.count / 8 + 16)
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "&"): out.append(contentsOf: "&amp;".utf8)
                case UInt8(ascii: "<"): out.append(contentsOf: "&lt;".utf8)
                case UInt8(ascii: ">"): out.append(contentsOf: "&gt;".utf8)
                case UInt8(ascii: "\""): out.append(contentsOf: "&quot;".utf8)
                case UInt8(ascii: "'"): out.append(contentsOf: "&#39;".utf8)
                default: out.append(byte)
                }
            }
            return String(decoding: out, as: UTF8.self)
        }
    }

    private static func needsEscaping(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "&") || byte == UInt8(ascii: "<") || byte == UInt8(ascii: ">") || byte == UInt8(ascii: "\"")
            || byte == UInt8(ascii: "'")
    }

    /// The escaper as a swift-mustache content type.
    struct ContentType: MustacheContentType {
        func escapeText(_ text: String) -> String { HTMLEscaping.escape(text) }
    }

    /// Registers ``ContentType`` under ``contentTypeName`` (swift-mustache looks pragmas up
    /// while parsing, so this runs before any template is registered); idempotent.
    static func register() {
        MustacheContentTypes.register(ContentType(), named: contentTypeName)
    }

    /// `template` starting with the pragma that selects this escaper. swift-mustache starts
    /// every template, partials included, with its own HTML escaping, so each template the
    /// dashboard registers gets the pragma in front.
    static func selectingScalarEscaping(_ template: String) -> String {
        "{{% CONTENT_TYPE: \(contentTypeName) }}" + template
    }
}
