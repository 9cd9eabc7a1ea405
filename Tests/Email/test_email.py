"""Alert e-mail against a real SMTP server (alerts.md, "Email").

    python test_email.py PATH/TO/crash-server   (DATABASE_URL in the environment; aiosmtpd importable)

PyPI's aiosmtpd plays the SMTP server, with a self-signed certificate made by openssl and given
to crash-server as CRASHGUARD_SMTP_CA_FILE. One crash-server at a time (they share the
database, and every server sends every due message):

1. STARTTLS required, AUTH required over TLS (credentials percent-decoded): a `group.new` rule
   mailing three addresses. One is accepted: headers (From, To, Date, Message-ID of the delivery
   id, Subject with RFC 2047 words, X-CrashGuard-*, Auto-Submitted, Precedence), a text and an
   HTML part that escape the hostile title and load nothing from outside. One gets a 451 to
   its data first and is accepted on the retry with the same delivery id. One is refused with
   a 550 at RCPT and never tried again. /metrics counts delivered, retry and failed.
2. TLS from the first byte (smtps): a message whose first attempt is held by the SMTP server
   while crash-server is killed with SIGKILL is sent by the restarted server, same delivery id.
Run by scripts/test.d/30-email.
"""
import asyncio
import email
import email.policy
import gzip
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from crash_server_process import free_port, stop, wait_ready  # noqa: E402

SERVER = sys.argv[1]
USER, PASSWORD = "crash guard", "p@ss:w/rd"
PUBLIC_URL = "https://crash.example.com"
SENDER = "alerts@crash.example.com"


def log(*args):
    print("[email]", *args, flush=True)


def check(condition, message):
    if not condition:
        raise SystemExit("FAILED: " + message)


class Handler:
    """Records every message; answers per recipient: `tempfail` 451 to the first data,
    `reject` 550 at RCPT, `hold` keeps the first data unanswered until released (then 451)."""

    def __init__(self):
        self.lock = threading.RLock()
        self.accepted = []  # (rcpt, bytes)
        self.attempts = {}  # rcpt -> [delivery ids of DATA attempts]
        self.rcpt_calls = {}
        self.logins = []
        self.release = threading.Event()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        with self.lock:
            self.rcpt_calls[address] = self.rcpt_calls.get(address, 0) + 1
        if address.startswith("reject@"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        rcpt = envelope.rcpt_tos[0]
        delivery = email.message_from_bytes(envelope.content)["X-CrashGuard-Delivery"]
        with self.lock:
            tries = self.attempts.setdefault(rcpt, [])
            tries.append(delivery)
            first = len(tries) == 1
            if session.auth_data is not None:
                self.logins.append(session.auth_data)
        if first and rcpt.startswith("tempfail@"):
            return "451 4.3.0 try again later"
        if first and rcpt.startswith("hold@"):
            while not self.release.is_set():
                await asyncio.sleep(0.05)
            return "451 4.3.0 try again later"
        with self.lock:
            self.accepted.append((rcpt, envelope.content))
        return "250 2.0.0 accepted"

    def wait(self, condition, what, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if condition(self):
                    return
            time.sleep(0.05)
        raise SystemExit(f"FAILED: waited {timeout} s for {what}")

    def messages(self, rcpt):
        with self.lock:
            return [content for to, content in self.accepted if to == rcpt]


def authenticate(server, session, envelope, mechanism, auth_data):
    ok = auth_data.login == USER.encode() and auth_data.password == PASSWORD.encode()
    return AuthResult(success=ok, auth_data=auth_data)


def make_certificate(directory):
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True)
    return cert, key


def tls_context(cert, key):
    # A context of both sides: aiosmtpd's controller also wraps its own readiness probe in it.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS)  # noqa: deprecated, but both sides
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(cert, key)
    return context


def start_server(port, smtp_url, ca_file):
    env = dict(os.environ)
    env.update({
        "CRASHGUARD_PORT": str(port), "CRASHGUARD_PUBLIC_URL": PUBLIC_URL, "CRASHGUARD_RATE_LIMIT": "0",
        "CRASHGUARD_SMTP_URL": smtp_url, "CRASHGUARD_EMAIL_FROM": SENDER, "CRASHGUARD_SMTP_CA_FILE": ca_file,
        "CRASHGUARD_SMTP_TIMEOUT": "5", "CRASHGUARD_WEBHOOK_POLL_INTERVAL": "0.1",
        "CRASHGUARD_WEBHOOK_RETRY_DELAY": "0.3", "CRASHGUARD_WEBHOOK_RETRY_MAX_DELAY": "0.6",
        "CRASHGUARD_SPIKE_INTERVAL": "0", "CRASHGUARD_ALERT_INTERVAL": "0", "CRASHGUARD_LOG_LEVEL": "notice",
    })
    process = subprocess.Popen([SERVER, "serve"], env=env)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base, process)
    return process, base


def request(url, body=None, token=None, method=None, headers=None):
    headers = dict(headers or {})
    if token:
        headers["Authorization"] = "Bearer " + token
    data = body
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=30) as response:
        text = response.read().decode()
        return response.status, (json.loads(text) if text.startswith("{") else text)


def create_project():
    name = "email-" + uuid.uuid4().hex[:10]
    out = subprocess.run([SERVER, "project", "create", name], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def ingest(base, key, reason):
    report = {
        "id": str(uuid.uuid4()), "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kind": "custom", "reason": reason, "fatal": True, "app": {"id": "com.example.app", "version": "2.1.0"},
        "device": {"os": "iOS", "id": "install-1"},
    }
    body = gzip.compress(json.dumps({"reports": [report]}).encode())
    status, answer = request(base + "/v1/reports", body, headers={
        "X-Crash-Key": key, "Content-Type": "application/json", "Content-Encoding": "gzip"})
    check(status == 202 and answer["accepted"] == 1, f"ingest: {status} {answer}")


def create_rule(base, project, name, to):
    status, rule = request(f"{base}/v1/projects/{project['project']}/alert-rules", {
        "name": name, "when": {"type": "group.new"}, "actions": [{"type": "email", "to": to}]}, token=project["readToken"])
    check(status == 201, f"rule: {status} {rule}")
    return rule


def metric(base, outcome):
    _, text = request(base + "/metrics")
    match = re.search(r'^crashguard_email_deliveries_total\{outcome="%s"\} (\d+)' % outcome, text, re.M)
    return int(match.group(1)) if match else 0


def parts(message):
    return {part.get_content_type(): part.get_content() for part in message.walk() if not part.is_multipart()}


def starttls_round(handler, cert, key):
    smtp_port, port = free_port(), free_port()
    controller = Controller(
        handler, hostname="127.0.0.1", port=smtp_port, tls_context=tls_context(cert, key), require_starttls=True,
        authenticator=authenticate, auth_required=True, auth_require_tls=True)
    controller.start()
    url = "smtp://crash%20guard:p%40ss%3Aw%2Frd@127.0.0.1:" + str(smtp_port)
    process, base = start_server(port, url, cert)
    try:
        project = create_project()
        slug = project["project"]
        rule = create_rule(base, project, 'Mail <b>"ops"</b> & team', ["ana@example.com", "tempfail@example.com", "reject@example.com"])
        title = '<script>alert("x")</script> <img src=https://evil.example/x.png> café 💥 & more'
        ingest(base, project["ingestKey"], title)

        handler.wait(lambda h: len(h.messages("ana@example.com")) == 1, "the accepted message")
        raw = handler.messages("ana@example.com")[0]
        message = email.message_from_bytes(raw, policy=email.policy.default)
        delivery = message["X-CrashGuard-Delivery"]
        check(uuid.UUID(delivery) is not None, "X-CrashGuard-Delivery is a UUID")
        check(message["Message-ID"] == f"<{delivery}@crash.example.com>", f"Message-ID: {message['Message-ID']}")
        check(message["From"] == SENDER and message["To"] == "ana@example.com", "From and To")
        check(abs((parsedate_to_datetime(message["Date"]) - datetime.now(timezone.utc)).total_seconds()) < 300, "Date")
        check(message["MIME-Version"] == "1.0", "MIME-Version")
        check(message["X-CrashGuard-Event"] == "group.new", "X-CrashGuard-Event")
        check(message["X-CrashGuard-Rule"] == str(rule["id"]), "X-CrashGuard-Rule")
        check(message["Auto-Submitted"] == "auto-generated" and message["Precedence"] == "bulk", "Auto-Submitted, Precedence")
        check(b"=?UTF-8?B?" in raw.split(b"\r\n\r\n", 1)[0], "the non-ASCII subject is RFC 2047 encoded")
        check(str(message["Subject"]) == f"[CrashGuard] New crash in {slug}: {title}", f"Subject: {message['Subject']}")
        check(message.get_content_type() == "multipart/alternative", "multipart/alternative")
        body = parts(message)
        check(set(body) == {"text/plain", "text/html"}, f"parts: {list(body)}")
        text, html = body["text/plain"], body["text/html"]
        groups = request(f"{base}/v1/projects/{slug}/crashes", token=project["readToken"])[1]["groups"]
        group = groups[0]
        link = f"{PUBLIC_URL}/projects/{slug}/crashes/{group['id']}"
        for expected in [slug, "New crash", title, 'Mail <b>"ops"</b> & team', group["firstSeen"], "2.1.0", "custom", link]:
            check(expected in text, f"text part lacks {expected!r}:\n{text}")
        check("<script" not in html and "<img" not in html and "<b>" not in html, "the HTML part escapes the title and rule")
        check("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html, "the escaped title is shown")
        check("Mail &lt;b&gt;&quot;ops&quot;&lt;/b&gt; &amp; team" in html, "the escaped rule name is shown")
        check(f'href="{link}"' in html, "the HTML part links the group")
        tags = re.findall(r"<[^>]*>", html)
        for tag in tags:
            check(not re.search(r"\b(src|background|srcset)=|url\(|@import", tag), f"a tag loads from outside: {tag}")
            check(not re.match(r"<(img|link|script|iframe|object|embed|style)\b", tag), f"a tag loads from outside: {tag}")
        check(handler.logins and all(getattr(login, "login", None) == USER.encode() for login in handler.logins), f"AUTH with the decoded user: {handler.logins}")

        handler.wait(lambda h: len(h.messages("tempfail@example.com")) == 1, "the retried message")
        tries = handler.attempts["tempfail@example.com"]
        retried = email.message_from_bytes(handler.messages("tempfail@example.com")[0])
        check(len(tries) == 2 and tries[0] == tries[1] == retried["X-CrashGuard-Delivery"], f"retry keeps the id: {tries}")
        check(retried["X-CrashGuard-Delivery"] != delivery, "one delivery id per address")
        check(retried["Message-ID"] == f"<{tries[0]}@crash.example.com>", "the retry's Message-ID")

        handler.wait(lambda h: metric(base, "failed") >= 1, "the refused address counted failed", timeout=10)
        time.sleep(1.5)  # several retry delays: a refused recipient is never tried again
        check(handler.rcpt_calls.get("reject@example.com") == 1, f"550 is permanent: {handler.rcpt_calls}")
        check("reject@example.com" not in handler.attempts, "no data for the refused address")
        check(metric(base, "delivered") == 2 and metric(base, "retry") == 1 and metric(base, "failed") == 1, "metrics")

        log("STARTTLS round passed: headers, escaping, 451 retry with the same id, 550 permanent")
    finally:
        stop(process)
        controller.stop()


def sigkill_round(handler, cert, key):
    smtp_port, port = free_port(), free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=smtp_port, ssl_context=tls_context(cert, key))
    controller.start()
    url = f"smtps://127.0.0.1:{smtp_port}"
    process, base = start_server(port, url, cert)
    second = None
    try:
        project = create_project()
        create_rule(base, project, "held", ["hold@example.com"])
        ingest(base, project["ingestKey"], "-[Checkout pay:] crashed")
        handler.wait(lambda h: len(h.attempts.get("hold@example.com", [])) == 1, "the held first attempt")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        handler.release.set()
        second, _ = start_server(port, url, cert)
        handler.wait(lambda h: len(h.messages("hold@example.com")) == 1, "the message sent after the restart", timeout=30)
        sent = email.message_from_bytes(handler.messages("hold@example.com")[0])
        held = handler.attempts["hold@example.com"][0]
        check(sent["X-CrashGuard-Delivery"] == held, "the restarted server sends the same delivery")
        log("implicit TLS and SIGKILL round passed")
    finally:
        if process.poll() is None:
            process.kill()
        if second is not None:
            stop(second)
        controller.stop()


def main():
    with tempfile.TemporaryDirectory() as directory:
        cert, key = make_certificate(directory)
        starttls_round(Handler(), cert, key)
        sigkill_round(Handler(), cert, key)
    print("2 passed, 0 failed")


if __name__ == "__main__":
    main()
