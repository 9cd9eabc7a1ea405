#!/usr/bin/env python3
"""The dashboard in a real browser: headless Chromium against a real crash-server.

Seeds a project through POST /v1/reports, then drives Chromium over the DevTools
protocol (--remote-debugging-pipe: no port, no extra Python package): signs in through the
form, loads the overview, the top crashes and a crash page, resolves a group through the
triage form, visits the Releases pages (sessions seeded through POST /v1/sessions), signs out; asserts on the DOM at each step, fails on any console error or
Content-Security-Policy violation, and saves a screenshot of each page.

Usage: test_browser.py BASE_URL INGEST_KEY READ_TOKEN PROJECT SCREENSHOT_DIR
"""
import base64
import contextlib
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

BASE, INGEST_KEY, READ_TOKEN, PROJECT, SHOTS = sys.argv[1:6]
HOSTILE = "<script>alert(1)</script>"
HOSTILE_TITLE = "<script>alert(<n>)</script>"
# A quote followed by a combining mark (one grapheme, but the quote still ends an attribute).
PWNED = 'x"\u0301 data-pwned="1'


def fail(message):
    print(f"dashboard browser test FAILED: {message}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- seed data

def rfc3339(t):
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def post_reports(reports):
    body = gzip.compress(json.dumps({"reports": reports}).encode())
    request = urllib.request.Request(
        BASE + "/v1/reports", data=body, method="POST",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip", "X-Crash-Key": INGEST_KEY})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    if answer.get("rejected"):
        fail(f"seed reports rejected: {answer['rejected'][:3]}")


def api(path, method="GET", body=None):
    request = urllib.request.Request(
        BASE + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {READ_TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


CRASHES = [
    # reason, kind, fatal, weight, stack
    ("-[__NSArrayM objectAtIndex:]: index 7 beyond bounds [0 .. 4]", "container", True, 60,
     ["CoreFoundation __exceptionPreprocess", "libobjc.A.dylib objc_exception_throw",
      "CoreFoundation -[__NSArrayM objectAtIndex:]", "Shop CartViewController.tableView(_:cellForRowAt:) + 212",
      "UIKitCore -[UITableView _createPreparedCellForGlobalRow:withIndexPath:willDisplay:]"]),
    ("-[NSNull length]: unrecognized selector sent to instance 0x1f0a3c8e0", "unrecognizedSelector", False, 38,
     ["CoreFoundation ___forwarding___", "Shop ProfileHeaderView.configure(with:) + 88",
      "Shop ProfileViewController.viewDidLoad() + 340"]),
    ("Fatal error: Unexpectedly found nil while unwrapping an Optional value", "exception", True, 25,
     ["libswiftCore.dylib _assertionFailure(_:_:file:line:flags:)", "Shop CheckoutService.submit(order:) + 1204",
      "Shop CheckoutViewController.payTapped(_:) + 96"]),
    ("Cannot remove an observer <Shop.PlayerView 0x10b2a4400> for the key path \"status\" because it is not registered as an observer.",
     "kvo", False, 18, ["Foundation -[NSObject(NSKeyValueObserverRegistration) removeObserver:forKeyPath:]",
                        "Shop PlayerView.deinit + 64"]),
    ("SIGSEGV at 0x0000000000000010", "signal", True, 12,
     ["Shop ImageCache.decode(_:) + 412", "Shop ImageCache.load(url:) + 220", "libdispatch.dylib _dispatch_call_block_and_release"]),
    ("NSInvalidArgumentException: *** -[__NSPlaceholderDictionary initWithObjects:forKeys:count:]: attempt to insert nil object from objects[2]",
     "container", False, 9, ["CoreFoundation -[__NSPlaceholderDictionary initWithObjects:forKeys:count:]",
                             "Shop AnalyticsEvent.payload() + 150"]),
    ("Timer fired on a deallocated target: Shop.RefreshController", "timer", False, 5,
     ["Foundation __NSFireTimer", "Shop RefreshController.tick() + 32"]),
]
VERSIONS = ["2.4.0", "2.3.1", "2.3.0", "2.2.0"]
DEVICES = [("iOS", "17.5", "iPhone15,2"), ("iOS", "18.1", "iPhone16,1"), ("iOS", "16.7", "iPhone12,1"),
           ("iPadOS", "18.1", "iPad13,4")]


def seed():
    rng = random.Random(17)
    now = datetime.now(timezone.utc)
    reports = []
    for index, (reason, kind, fatal, weight, stack) in enumerate(CRASHES):
        # Older crashes over 7 days; the last two are new (first seen today).
        span = 7 * 24 if index < 5 else 20
        for n in range(weight * 3):
            age = timedelta(hours=rng.triangular(0, span, span * 0.15), minutes=rng.random() * 59)
            os_name, os_version, model = rng.choice(DEVICES)
            reports.append({
                "id": str(uuid.UUID(int=rng.getrandbits(128))), "timestamp": rfc3339(now - age), "kind": kind,
                "reason": reason, "fatal": fatal,
                "app": {"id": "com.example.shop", "version": rng.choice(VERSIONS[: 2 + index % 3]), "build": "4821"},
                "device": {"os": os_name, "osVersion": os_version, "model": model, "id": f"device-{rng.randrange(400)}"},
                "stack": stack, "context": {"screen": rng.choice(["Cart", "Profile", "Checkout", "Home"]),
                                            "locale": rng.choice(["en_US", "de_DE", "ja_JP"])},
            })
        if index < 5:
            # Known for a while: first seen before the 7-day window, so not "new" on the overview.
            reports.append(dict(reports[-1], id=str(uuid.UUID(int=rng.getrandbits(128))),
                                timestamp=rfc3339(now - timedelta(days=12 + index))))
    # An attacker-controlled reason, context and stack: must render as text.
    reports.append({
        "id": str(uuid.uuid4()), "timestamp": rfc3339(now - timedelta(days=5)), "kind": "custom", "reason": HOSTILE,
        "app": {"id": "com.example.shop", "version": "2.2.0"},
        "device": {"os": "iOS", "model": "<img src=x onerror=alert(2)>", "id": "device-evil"},
        "stack": ["<iframe src=//example.com>"], "context": {"note": "\"><script>alert(3)</script>"},
    })
    # The same group, older: a quote and a combining mark in the model, the OS and the context.
    reports.append({
        "id": str(uuid.uuid4()), "timestamp": rfc3339(now - timedelta(days=5, hours=1)), "kind": "custom",
        "reason": HOSTILE, "app": {"id": "com.example.shop", "version": "2.2.0"},
        "device": {"os": PWNED, "model": PWNED, "id": "device-evil"}, "stack": ["<iframe src=//example.com>"],
        "context": {PWNED: PWNED},
    })
    for i in range(0, len(reports), 500):
        post_reports(reports[i:i + 500])
    groups = api(f"/v1/projects/{PROJECT}/crashes?limit=50")["groups"]
    by_title = {g["title"]: g for g in groups}
    # One group resolved in 2.3.0 then seen again in 2.4.0: regressed.
    kvo = next(g for t, g in by_title.items() if t.startswith("Cannot remove an observer"))
    api(f"/v1/projects/{PROJECT}/crashes/{kvo['id']}", "PATCH", {"status": "resolved", "resolvedIn": "2.4.0"})
    post_reports([{
        "id": str(uuid.uuid4()), "timestamp": rfc3339(now - timedelta(minutes=20)), "kind": "kvo",
        "reason": CRASHES[3][0], "app": {"id": "com.example.shop", "version": "2.4.0"},
        "device": {"os": "iOS", "osVersion": "18.1", "model": "iPhone16,1", "id": "device-7"}, "stack": CRASHES[3][4],
    }])
    timer = next(g for t, g in by_title.items() if t.startswith("Timer fired"))
    api(f"/v1/projects/{PROJECT}/crashes/{timer['id']}", "PATCH", {"status": "resolved", "resolvedIn": "2.4.1"})
    seed_sessions(now)
    # Reports in the 7-day window: all but the 5 older ones, plus the regression.
    return len(reports) - 5 + 1


def seed_sessions(now):
    """Release health: 2.4.0 with 8 sessions (2 crashed), 2.3.1 with 4 (none crashed), and one
    staging session of 2.3.0."""
    sessions = []
    for i in range(8):
        sessions.append({"sid": str(uuid.uuid4()), "did": f"user-{i % 5}", "started": rfc3339(now - timedelta(hours=i + 1)),
                         "status": "crashed" if i < 2 else "exited", "attrs": {"release": "com.example.shop@2.4.0+4821"}})
    for i in range(4):
        sessions.append({"sid": str(uuid.uuid4()), "did": f"user-{i}", "started": rfc3339(now - timedelta(hours=30 + i)),
                         "status": "exited", "attrs": {"release": "com.example.shop@2.3.1"}})
    sessions.append({"sid": str(uuid.uuid4()), "started": rfc3339(now - timedelta(hours=2)), "status": "ok",
                     "attrs": {"release": "com.example.shop@2.3.0", "environment": "staging"}})
    request = urllib.request.Request(
        BASE + "/v1/sessions", data=json.dumps({"sessions": sessions}).encode(), method="POST",
        headers={"Content-Type": "application/json", "X-Crash-Key": INGEST_KEY})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    if answer.get("accepted") != len(sessions):
        fail(f"seed sessions: {answer}")


# ---------------------------------------------------------------- the browser

class Browser:
    """Chromium over --remote-debugging-pipe: JSON messages separated by NUL on fds 3 and 4."""

    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix="crashguard-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        args = [binary, "--headless=new", "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--hide-scrollbars", "--mute-audio", f"--user-data-dir={self.profile}", "--window-size=1440,900",
                "--force-device-scale-factor=1", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # root in CI containers: Chromium refuses its sandbox as root
        # The child closes every other descriptor after preexec_fn: keep 3 and 4, set there.
        self.process = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=child_fds,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def send(self, method, params=None, session=True, timeout=30):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self.read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    fail(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def read(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                fail("Chromium did not answer in time")
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                fail("Chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_event(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    del self.events[i]
                    return event
            self.events.append(self.read(deadline))

    def open_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def load(self, action):
        """Runs `action` (navigate or submit) and waits for the next page's load event."""
        self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
        action()
        self.wait_event("Page.loadEventFired")

    def goto(self, url):
        self.load(lambda: self.send("Page.navigate", {"url": url}))

    def js(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            fail(f"page script failed: {expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self):
        """Console errors, exceptions and CSP violations seen so far."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            # Network entries are the deliberate 401 and 403 answers, checked on their own.
            if method == "Log.entryAdded" and params["entry"]["level"] == "error" and params["entry"].get("source") != "network":
                out.append(params["entry"]["text"])
            elif method == "Runtime.exceptionThrown":
                out.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(json.dumps(params["args"])[:300])
        return out

    def screenshot(self, path):
        height = min(int(self.js("document.documentElement.scrollHeight")), 2400)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1440, "height": max(height, 900), "deviceScaleFactor": 1, "mobile": False})
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        self.send("Emulation.clearDeviceMetricsOverride")
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except SystemExit:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def page_path(cookie):
    """The path the project's overview ends at when requested with only this cookie."""
    request = urllib.request.Request(f"{BASE}/projects/{PROJECT}", headers={"Cookie": f"{cookie['name']}={cookie['value']}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return urllib.parse.urlsplit(response.geturl()).path


def expect(condition, message):
    if not condition:
        fail(message)


@contextlib.contextmanager
def browser_test(name, sign_in=False):
    """The Chromium page of one browser test: opened (signed in with the read token when
    `sign_in`), checked when the test's body has passed (no console error or CSP violation may
    have shown), closed whether it passed or not; then prints `NAME: ok (SECONDS s)`."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    expect(binary, "no chromium on PATH")
    os.makedirs(SHOTS, exist_ok=True)
    started = time.monotonic()
    browser = Browser(binary)
    try:
        browser.open_page()
        if sign_in:
            browser.goto(BASE + "/")
            browser.js(f"document.querySelector('#token').value = {json.dumps(READ_TOKEN)}")
            browser.load(lambda: browser.js("document.querySelector('#signin-form').submit()"))
        yield browser
        problems = browser.problems()
        expect(not problems, f"console errors or CSP violations: {problems[:5]}")
    finally:
        browser.close()
    print(f"{name}: ok ({time.monotonic() - started:.1f} s)")


def main():
    seeded = seed()
    print(f"seeded {seeded} reports into {PROJECT}")
    with browser_test("dashboard browser test") as browser:
        # Signed out: every page leads to the sign-in form.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes")
        expect(browser.js("location.pathname") == "/", "a page without a session did not redirect to sign-in")
        expect(browser.js("!!document.querySelector('#signin-form input[name=token][type=password]')"), "no sign-in form")
        browser.screenshot(os.path.join(SHOTS, "dashboard-signin.png"))

        # A wrong token: the form says so.
        browser.js("document.querySelector('#token').value = 'cgr_wrong'")
        browser.load(lambda: browser.js("document.querySelector('#signin-form').submit()"))
        expect("does not belong" in (browser.js("document.querySelector('#signin-error')?.textContent") or ""),
               "a wrong token showed no error")

        # Sign in.
        browser.js(f"document.querySelector('#token').value = {json.dumps(READ_TOKEN)}")
        browser.load(lambda: browser.js("document.querySelector('#signin-form').submit()"))
        expect(browser.js("location.pathname") == f"/projects/{PROJECT}", "sign-in did not lead to the overview")
        expect(browser.js("document.cookie") == "", "the session cookie is readable from scripts (not HttpOnly)")
        expect(browser.js("document.querySelector('#project-name').textContent") == PROJECT, "overview: wrong project")
        total = browser.js("document.querySelector('#total-reports').textContent")
        expect(int(total.replace(",", "")) == seeded, f"overview: {total} reports, seeded {seeded}")
        expect(browser.js("document.querySelectorAll('#reports-chart rect.bar').length") > 100, "overview: no chart bars")
        # New on the overview: first seen in the 7-day window (the two of today and the hostile one).
        expect(browser.js("document.querySelectorAll('#new-panel tbody tr').length") == 3, "overview: not 3 new groups")
        expect(browser.js("document.querySelectorAll('#regressed-panel tbody tr').length") == 1, "overview: not 1 regressed group")
        browser.screenshot(os.path.join(SHOTS, "dashboard-overview.png"))

        # Top crashes: rows, sparklines, badges, the hostile title as text and no script anywhere.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes")
        rows = browser.js("[...document.querySelectorAll('#crash-table tr.crash-row')].map(r => ["
                          "r.querySelector('.crash-link').textContent, r.querySelector('td.count').textContent,"
                          "r.querySelectorAll('polyline').length, r.querySelector('.badge.new') !== null])")
        expect(len(rows) == 8, f"top crashes: {len(rows)} rows, expected 8 (7 seeded crashes and the hostile one)")
        expect(rows[0][0].startswith("-[__NSArrayM objectAtIndex:]"), f"top crash is {rows[0][0]}")
        expect(all(r[2] == 1 for r in rows), "a row without a sparkline")
        counts = [int(r[1].replace(",", "")) for r in rows]
        expect(counts == sorted(counts, reverse=True), f"rows not by count: {counts}")
        expect(sum(1 for r in rows if r[3]) == 2, "not exactly the 2 new groups have a 'new' badge")
        # Group titles are normalized reasons (digits become <n>): the hostile one is still text.
        expect(any(r[0] == HOSTILE_TITLE for r in rows), "the hostile reason is not shown as text")
        expect(browser.js("document.querySelectorAll('script, iframe').length") == 0, "a script or iframe made it into the DOM")
        expect(browser.js("document.querySelectorAll('[data-pwned]').length") == 0, "report text added an attribute")
        browser.screenshot(os.path.join(SHOTS, "dashboard-crashes.png"))
        # The filters work without JavaScript (a GET form); here: kind = signal.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes?kind=signal&window=30d")
        expect(browser.js("document.querySelectorAll('tr.crash-row').length") == 1, "kind filter")

        # The hostile group's page: stack, context and model are text too.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes?window=30d")
        evil = browser.js(f"[...document.querySelectorAll('.crash-link')].find(a => a.textContent === {json.dumps(HOSTILE_TITLE)}).href")
        browser.goto(evil)
        expect(browser.js("document.querySelector('#crash-title').textContent") == HOSTILE_TITLE, "hostile title not text")
        expect(browser.js("document.querySelector('pre.reason').textContent") == HOSTILE, "hostile reason not text")
        expect(browser.js("document.querySelectorAll('script, iframe, img').length") == 0, "hostile report injected markup")
        expect('"><script>alert(3)</script>' in browser.js("document.querySelector('dl.context').textContent"),
               "hostile context not shown as text")
        expect(browser.js("document.querySelectorAll('[data-pwned]').length") == 0, "report text added an attribute")
        expect(browser.js(f"[...document.querySelectorAll('.breakdown .v')].filter(e => e.textContent === {json.dumps(PWNED)}"
                          f" && e.title === {json.dumps(PWNED)}).length") == 2, "model and OS with a combining mark not shown as text")
        expect(PWNED + PWNED in browser.js("[...document.querySelectorAll('dl.context')].map(e => e.textContent).join('')"),
               "context with a combining mark not shown as text")

        # Crash detail of the top group, then resolve it through the form.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes")
        browser.goto(browser.js("document.querySelector('.crash-link').href"))
        expect(browser.js("document.querySelectorAll('#histogram rect.bar').length") == 7 * 24 or
               browser.js("document.querySelectorAll('#histogram rect.bar').length") == 7 * 24 + 1, "histogram: not hourly over 7 days")
        expect(browser.js("document.querySelectorAll('.breakdown li').length") >= 6, "breakdowns missing")
        expect(browser.js("document.querySelectorAll('#latest pre.stack .frame').length") >= 5, "latest reports without stacks")
        expect(browser.js("document.querySelector('#crash-status').textContent") == "Open", "top group not open")
        browser.screenshot(os.path.join(SHOTS, "dashboard-crash.png"))
        browser.js("document.querySelector('#resolved-in-input').value = '2.4.1'")
        browser.load(lambda: browser.js("document.querySelector('#resolve-form').submit()"))
        expect(browser.js("document.querySelector('#crash-status').textContent") == "Resolved", "resolve form did not resolve")
        expect(browser.js("document.querySelector('#resolved-in').textContent") == "fixed in 2.4.1", "resolvedIn not shown")
        expect("Marked as resolved in 2.4.1." in browser.js("document.querySelector('#notice').textContent"), "no notice")
        group_id = browser.js("location.pathname.split('/').pop()")
        stored = api(f"/v1/projects/{PROJECT}/crashes/{group_id}")
        expect(stored["status"] == "resolved" and stored["resolvedIn"] == "2.4.1", f"API disagrees: {stored['status']}")
        browser.screenshot(os.path.join(SHOTS, "dashboard-crash-resolved.png"))
        # Reopen it again through its form.
        browser.load(lambda: browser.js("document.querySelector('#reopen-form').submit()"))
        expect(browser.js("document.querySelector('#crash-status').textContent") == "Open", "reopen form did not reopen")

        # A form whose CSRF token was tampered with is refused.
        browser.js("document.querySelector('#ignore-form input[name=csrf]').value = 'forged'")
        browser.load(lambda: browser.js("document.querySelector('#ignore-form').submit()"))
        expect(browser.js("document.title").startswith("Forbidden"), "a forged CSRF token was accepted")
        expect(api(f"/v1/projects/{PROJECT}/crashes/{group_id}")["status"] == "open", "forged form changed the group")

        # Releases: per version the sessions, crash-free rates and adoption; a release's page
        # with its series and top crash groups, each linking to the group's page.
        browser.goto(f"{BASE}/projects/{PROJECT}/releases?environment=production")
        releases = browser.js("[...document.querySelectorAll('#release-table tr.release-row')].map(r => ["
                              "r.querySelector('.release-link').textContent, r.querySelector('td.sessions').textContent,"
                              "r.querySelector('td.crash-free-sessions').textContent, r.querySelector('td.adoption').textContent])")
        expect([r[0] for r in releases] == ["2.4.0", "2.3.1"], f"releases: {releases}")
        expect(releases[0][1:] == ["8", "75.00 %", "66.66 %"], f"release 2.4.0 row: {releases[0]}")
        browser.screenshot(os.path.join(SHOTS, "dashboard-releases.png"))
        browser.goto(f"{BASE}/projects/{PROJECT}/releases?environment=staging")
        expect(browser.js("document.querySelectorAll('tr.release-row').length") == 1, "releases: environment filter")
        browser.goto(f"{BASE}/projects/{PROJECT}/releases?environment=production")
        browser.goto(browser.js("document.querySelector('.release-link').href"))
        expect(browser.js("document.querySelector('#release-version').textContent") == "2.4.0", "release page: version")
        expect(browser.js("document.querySelector('#release-sessions').textContent") == "8", "release page: sessions")
        expect(browser.js("document.querySelectorAll('#sessions-chart rect.bar').length") > 100, "release page: no series")
        expect(browser.js("document.querySelectorAll('#series-table tbody tr').length") == 8, "release page: series rows")
        expect(browser.js("document.querySelectorAll('#top-groups .crash-link').length") >= 1, "release page: no top groups")
        browser.screenshot(os.path.join(SHOTS, "dashboard-release.png"))
        browser.goto(browser.js("document.querySelector('#top-groups .crash-link').href"))
        expect(browser.js("!!document.querySelector('#crash-title')"), "a top group's link does not open its page")

        # Sign out; a copy of the session cookie taken before opens nothing afterwards.
        browser.goto(f"{BASE}/projects/{PROJECT}")
        copied = [c for c in browser.send("Network.getCookies", {"urls": [BASE + "/"]})["cookies"] if c["name"] == "cg_session"]
        expect(len(copied) == 1 and copied[0]["httpOnly"] and copied[0]["sameSite"] == "Strict", f"session cookie: {copied}")
        expect(page_path(copied[0]) == f"/projects/{PROJECT}", "the copied cookie did not open the page before sign-out")
        browser.load(lambda: browser.js("document.querySelector('#sign-out').click()"))
        expect(browser.js("location.pathname") == "/", "sign-out did not lead to sign-in")
        browser.goto(f"{BASE}/projects/{PROJECT}")
        expect(browser.js("location.pathname") == "/", "still signed in after sign-out")
        expect(page_path(copied[0]) == "/", "a copy of the old session cookie still opens the page after sign-out")

    print(f"screenshots in {SHOTS}")


if __name__ == "__main__":
    main()
