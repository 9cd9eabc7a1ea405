#!/usr/bin/env python3
"""Server-side symbolication end to end (issue 19), against a real crash-server and PostgreSQL.

The example app (release build, with DWARF) is split like a shipped app: its debug file
(`objcopy --only-keep-debug`) is kept aside and the binary that runs is stripped, so the
device cannot name a single frame of the app. It crashes (abort in `crashAbortInParser`,
index out of range in `crashIndexOutOfRange`) and the next run reports. Then:
- `GET .../reports` has no `symbolicated` frames while no debug file is uploaded;
- `POST /v1/projects/{p}/debug-files` refuses a file that is no debug file (400), wants the read token
  (401 with the ingest key), a file over the size limit (413) and a bad name (400), stores
  the stripped binary (201) and takes it again (200, unchanged);
- `crash-server debug-files upload` stores the debug file, replacing the stripped one
  (its DWARF makes it richer);
- `GET .../reports` and the group's detail then show the crashing functions with
  main.swift:line (the line of the `abort()` call), the stack as it was sent, the groups
  unchanged; a guard's report (return addresses and images, like a crash's) resolves to the
  line of the guarded call.

Needs DATABASE_URL or CRASHGUARD_TEST_DATABASE_URL, CRASHGUARD_BIN_PATH (crash-server) and
CRASHGUARD_EXAMPLE (the release example app; scripts/test builds it), objcopy and strip.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

from harness import check, crash, create_project, env, finish, get, report, request, running_server, server_bin

example_built = os.environ.get("CRASHGUARD_EXAMPLE") or ".build/release/crashguard-example"
main_swift = "Examples/crashguard-example/main.swift"


def line_of(pattern):
    with open(main_swift) as f:
        for number, line in enumerate(f, 1):
            if pattern in line:
                return number
    raise RuntimeError(f"{pattern!r} not in {main_swift}")


work = tempfile.mkdtemp(prefix="crashguard-symbolication-")
example = os.path.join(work, "crashguard-example")
debug_file = os.path.join(work, "crashguard-example.debug")
# The build with DWARF; its debug file aside; the binary that runs stripped.
subprocess.run(["objcopy", "--only-keep-debug", example_built, debug_file], check=True)
subprocess.run(["strip", "-o", example, example_built], check=True)
nm = subprocess.run(["nm", example], capture_output=True, text=True)
check("crashAbortInParser" not in nm.stdout, "the binary that crashes has no symbol table naming the app's functions")

slug, key, token = create_project("symbolicate")
# The server's upload limit between the stripped binary and the debug file (the CLI keeps the default).
upload_limit = (os.path.getsize(example) + os.path.getsize(debug_file)) // 2
with running_server("symbolication", {"CRASHGUARD_MAX_DEBUG_FILE_BYTES": str(upload_limit)}) as (port, log_name):
    try:
        directory = os.path.join(work, "app")
        for kind in ["abort", "index"]:
            crash(example, kind, directory)
            report(example, port, key, directory)

        base = f"/v1/projects/{slug}"
        groups = [g for g in get(port, f"{base}/crashes?limit=200", token)["groups"] if g["kind"] == "signal"]
        check(len(groups) == 2, f"two signal groups ({[g['title'] for g in groups]})")
        before = {g["id"]: get(port, f"{base}/crashes/{g['id']}/reports", token)["reports"][0] for g in groups}
        for r in before.values():
            check("symbolicated" not in r, "no symbolicated frames before a debug file is uploaded")
            images = [v for k, v in r.get("context", {}).items() if k.startswith("image.") and "crashguard-example" in v]
            check(len(images) == 1, f"the report names the app's image with its build id ({images})")

        # REST: refusals first, then the stripped binary (symbols: none, DWARF: none).
        status, body = request(port, "POST", f"{base}/debug-files?name=notes.txt", token, b"not an ELF file at all")
        check(status == 400 and "not a Mach-O, ELF or dSYM zip file" in body.get("error", ""), f"a non-ELF file is 400 ({status} {body})")
        status, _ = request(port, "POST", f"{base}/debug-files?name=x", key, open(example, "rb").read())
        check(status == 401, f"the ingest key cannot upload ({status})")
        status, body = request(port, "POST", f"{base}/debug-files?name=crashguard-example", token, open(example, "rb").read())
        check(status == 201 and body["outcome"] == "created" and body["file"]["hasDebugInfo"] is False,
              f"the stripped binary is stored (201, no DWARF): {status} {body}")
        build_id = body["file"]["buildId"] if isinstance(body, dict) and "file" in body else ""
        status, body = request(port, "POST", f"{base}/debug-files?name=crashguard-example", token, open(example, "rb").read())
        check(status == 200 and body["outcome"] == "unchanged", f"re-uploading it changes nothing (200): {status} {body}")
        status, body = request(port, "POST", f"{base}/debug-files?name=big", token, open(debug_file, "rb").read())
        check(status == 413, f"a file over CRASHGUARD_MAX_DEBUG_FILE_BYTES is 413 ({status} {body!r:.200})")
        status, body = request(port, "POST", f"{base}/debug-files?name=a/b", token, open(example, "rb").read())
        check(status == 400 and "name" in body.get("error", ""), f"a name with '/' is 400 ({status} {body})")
        readelf = subprocess.run(["readelf", "-n", example], capture_output=True, text=True).stdout
        check(build_id != "" and build_id in readelf, f"stored under the binary's GNU build id ({build_id})")

        # CLI: the debug file, which replaces the poorer stripped binary.
        p = subprocess.run([server_bin, "debug-files", "upload", slug, debug_file], env=env, capture_output=True, text=True)
        out = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else {}
        check(out.get("outcome") == "replaced" and out.get("file", {}).get("hasDebugInfo") is True and out["file"]["buildId"] == build_id,
              f"crash-server debug-files upload stores the debug file ({p.returncode} {p.stdout.strip()} {p.stderr.strip()[-300:]})")
        p = subprocess.run([server_bin, "debug-files", "upload", slug, main_swift], env=env, capture_output=True, text=True)
        check(p.returncode != 0 and "not a Mach-O, ELF or dSYM zip file" in p.stderr, f"the CLI refuses a non-ELF file ({p.returncode} {p.stderr.strip()[-200:]})")

        abort_line = line_of("if Opaque.value == nil { abort() }")
        # Not asserted (benchmarks measure, tests check): the first read symbolicates, the next is cached.
        for label in ["first read (symbolizer started, debug file written out)", "second read (cache)"]:
            started = time.monotonic()
            get(port, f"{base}/crashes/{groups[0]['id']}/reports", token)
            print(f"     {label}: {(time.monotonic() - started) * 1000:.1f} ms")
        for g in groups:
            r = get(port, f"{base}/crashes/{g['id']}/reports", token)["reports"][0]
            check(r["stack"] == before[g["id"]]["stack"], f"{g['title'][:60]}: the stack is as it was sent")
            frames = r.get("symbolicated", [])
            described = [f"{f.get('function')} {f.get('file')}:{f.get('line')} inlined={[i.get('function') for i in f.get('inlined') or []]}" for f in frames]
            print("     " + "\n     ".join(described[:6]))
            app_frames = [f for f in frames if f["image"] == "crashguard-example"]
            check(len(app_frames) > 0 and all(f["buildId"] == build_id for f in app_frames), f"{g['title'][:60]}: app frames symbolicated")
            def names(f):
                return [f.get("function") or ""] + [i.get("function") or "" for i in f.get("inlined") or []]
            if "crashAbortInParser" in json.dumps(frames) or "abort" in g["title"].lower() or "SIGABRT" in g["title"]:
                top = next((f for f in app_frames if any("crashAbortInParser" in n for n in names(f))), None)
                check(top is not None and top["file"].endswith("main.swift") and top["line"] == abort_line,
                      f"abort: crashAbortInParser at main.swift:{abort_line} ({top})")
            else:
                top = next((f for f in app_frames if any("crashIndexOutOfRange" in n for n in names(f))), None)
                located = top is not None and (top["file"].endswith("main.swift") or any(
                    (i.get("file") or "").endswith("main.swift") for i in top.get("inlined") or []))
                check(located, f"index out of range: crashIndexOutOfRange in main.swift ({top})")
            detail = get(port, f"{base}/crashes/{g['id']}", token)
            check(detail["latest"] and detail["latest"][0].get("symbolicated") == frames and "stack" not in detail["latest"][0],
                  f"{g['title'][:60]}: the detail's latest report carries the same frames, still without its stack")
        # A guard's report (`numbers[guarded: 7]` in the report run): return addresses and
        # images like a crash's, resolved by the same debug file.
        guard_line = line_of("numbers[guarded: 7]")
        containers = [g for g in get(port, f"{base}/crashes?limit=200", token)["groups"] if g["kind"] == "container"]
        check(len(containers) == 1, f"one container group ({[g['title'] for g in containers]})")
        r = get(port, f"{base}/crashes/{containers[0]['id']}/reports", token)["reports"][0]
        check(any(k.startswith("image.") and build_id in v for k, v in r.get("context", {}).items()),
              "the guard report names the app's image with its build id")
        frames = [f for f in r.get("symbolicated", []) if f["image"] == "crashguard-example"]
        def at_guard(f):
            places = [(f.get("file") or "", f.get("line"))] + [(i.get("file") or "", i.get("line")) for i in f.get("inlined") or []]
            return any(file.endswith("main.swift") and line == guard_line for file, line in places)
        check(any(at_guard(f) for f in frames),
              f"the container guard's report resolves to main.swift:{guard_line} "
              f"({[(f.get('function'), f.get('file'), f.get('line')) for f in frames][:6]})")

        after = [g for g in get(port, f"{base}/crashes?limit=200", token)["groups"] if g["kind"] == "signal"]
        check(sorted((g["id"], g["signature"], g["count"]) for g in after) == sorted((g["id"], g["signature"], g["count"]) for g in groups),
              "groups unchanged by symbolication")
    finally:
        shutil.rmtree(work, ignore_errors=True)

finish(log_name)
print("symbolication end to end: ok")
