import CrashGrouping
import CrashWire
import Foundation

/// One hand-written corpus case: a reason or a frame and its expected normalized text.
struct CorpusCase: Sendable, CustomStringConvertible {
    var isFrame: Bool
    var input: String
    var expected: String
    var line: Int

    var description: String { "normalize.txt:\(line)" }
}

/// A report's grouping fields, as written in `groups.json`.
struct GroupingInput: Codable, Sendable {
    var kind: ReportKind?
    var reason: String
    var stack: [String]?
    var fingerprint: [String]?
}

extension GroupingInput {
    /// Its signature hash under `version`, with `kind` (a group's) or else its own (`custom`
    /// when it has none).
    func signature(_ version: GroupingVersion, kind: ReportKind? = nil) -> String {
        Grouping.signature(kind: kind ?? self.kind ?? .custom, reason: reason, stack: stack, fingerprint: fingerprint, version: version).hash
    }
}

struct SameGroup: Codable, Sendable, CustomStringConvertible {
    var name: String
    var kind: ReportKind
    var variants: [GroupingInput]
    var description: String { name }

    /// The variants' signature hashes under `version`, with the group's kind.
    func signatures(_ version: GroupingVersion) -> [String] { variants.map { $0.signature(version, kind: kind) } }
}

struct DistinctPair: Codable, Sendable, CustomStringConvertible {
    var name: String
    var a: GroupingInput
    var b: GroupingInput
    var description: String { name }
}

struct GroupsFile: Codable, Sendable {
    var same: [SameGroup]
    var distinct: [DistinctPair]
}

/// Loads the files of `Corpus/` (copied into the test bundle).
enum Corpus {
    static func url(_ name: String) -> URL? {
        Bundle.module.url(forResource: "Corpus", withExtension: nil)?.appendingPathComponent(name)
    }

    static let cases: [CorpusCase] = {
        guard let url = url("normalize.txt"), let text = try? String(contentsOf: url, encoding: .utf8) else {
            return []
        }
        return parse(text)
    }()

    /// v2's cases: those of `normalize.txt` that v2 normalizes differently, and its own.
    static let casesV2: [CorpusCase] = {
        guard let url = url("normalize-v2.txt"), let text = try? String(contentsOf: url, encoding: .utf8) else {
            return []
        }
        return parse(text)
    }()

    static let groupsV2: GroupsFile = load("groups-v2.json")

    static let groups: GroupsFile = load("groups.json")

    static func load(_ name: String) -> GroupsFile {
        guard let url = url(name), let data = try? Data(contentsOf: url),
            let file = try? JSONDecoder().decode(GroupsFile.self, from: data)
        else { return GroupsFile(same: [], distinct: []) }
        return file
    }

    /// `R <reason>` or `F <frame>`, then `= <expected>`; `#` starts a comment.
    static func parse(_ text: String) -> [CorpusCase] {
        var result: [CorpusCase] = []
        var pending: (isFrame: Bool, input: String, line: Int)?
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if line.hasPrefix("R ") || line.hasPrefix("F ") {
                pending = (line.hasPrefix("F "), unescape(line.dropFirst(2)), index + 1)
            } else if line.hasPrefix("= "), let current = pending {
                result.append(
                    CorpusCase(
                        isFrame: current.isFrame, input: current.input, expected: unescape(line.dropFirst(2)),
                        line: current.line))
                pending = nil
            }
        }
        return result
    }

    /// `\n`, `\t`, `\r`, `\0`, `\s` (a space) and `\\`.
    static func unescape(_ text: Substring) -> String {
        var out = ""
        var iterator = text.makeIterator()
        while let c = iterator.next() {
            guard c == "\\", let next = iterator.next() else {
                out.append(c)
                continue
            }
            switch next {
            case "n": out.append("\n")
            case "t": out.append("\t")
            case "r": out.append("\r")
            case "0": out.append("\u{0}")
            case "s": out.append(" ")
            case "\\": out.append("\\")
            default:
                out.append("\\")
                out.append(next)
            }
        }
        return out
    }
}
