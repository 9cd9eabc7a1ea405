#!/usr/bin/env python3
"""The dashboard's triage forms in a real browser (triage.md): headless Chromium against a real
crash-server, through test_browser's DevTools driver. On a group of its own it adds a comment,
assigns and snoozes the group through the crash page's forms, then resolves it with the list's
bulk form (checkbox); asserts on the page and on the REST API after each step, checks that
every POST form carries the CSRF token, and fails on any console error or CSP violation.

Usage: test_triage_browser.py BASE_URL INGEST_KEY READ_TOKEN PROJECT SCREENSHOT_DIR
"""
import json
import os
import uuid
from datetime import datetime, timedelta, timezone

from test_browser import BASE, PROJECT, SHOTS, api, browser_test, expect, post_reports, rfc3339

REASON = "TriageBrowserCheck failed in checkout step"
COMMENT = 'Looks like the <b>cart</b> race — "see #42"'


def activity(group):
    return api(f"/v1/projects/{PROJECT}/crashes/{group}/activity")["activity"]


def main():
    now = datetime.now(timezone.utc)
    post_reports([{
        "id": str(uuid.uuid4()), "timestamp": rfc3339(now - timedelta(minutes=5)), "kind": "custom", "reason": REASON,
        "app": {"id": "com.example.shop", "version": "2.4.0"}, "device": {"os": "iOS", "id": "device-t"},
    }])
    group = next(g for g in api(f"/v1/projects/{PROJECT}/crashes?limit=200")["groups"] if g["title"] == REASON)["id"]
    with browser_test("dashboard triage browser test", sign_in=True) as browser:
        page = f"{BASE}/projects/{PROJECT}/crashes/{group}"
        browser.goto(page)
        missing = browser.js("[...document.querySelectorAll('form[method=post]')]"
                             ".filter(f => !(f.querySelector('input[name=csrf]')?.value)).map(f => f.id)")
        expect(missing == [], f"crash page: POST forms without a CSRF token: {missing}")

        # A comment, shown as written (escaped) in the timeline, by the read token.
        browser.js(f"document.querySelector('#comment-text').value = {json.dumps(COMMENT)}")
        browser.load(lambda: browser.js("document.querySelector('#comment-form').submit()"))
        first = browser.js("document.querySelector('#activity-list li')?.textContent") or ""
        expect(COMMENT in first and "read token" in first, f"the comment is not the newest entry: {first!r}")
        expect(not browser.js("!!document.querySelector('#activity-list b')"), "the comment's markup was rendered")
        entries = activity(group)
        expect(entries[0]["type"] == "comment" and entries[0]["data"] == {"text": COMMENT}, f"API activity: {entries[:2]}")

        # Assign.
        browser.js("document.querySelector('#assignee-input').value = 'ana@example.com'")
        browser.load(lambda: browser.js("document.querySelector('#assign-form').submit()"))
        expect(browser.js("document.querySelector('#assignee-input').value") == "ana@example.com", "assignee not shown")
        expect(api(f"/v1/projects/{PROJECT}/crashes/{group}")["assignee"] == "ana@example.com", "assignee not stored")

        # Snooze until 10 more reports.
        browser.load(lambda: browser.js("document.querySelector('#snooze-form button[value=count10]').click()"))
        expect("10 more reports" in (browser.js("document.querySelector('#snoozed')?.textContent") or ""), "snooze not shown")
        detail = api(f"/v1/projects/{PROJECT}/crashes/{group}")
        expect(detail["status"] == "ignored" and detail["snoozed"]["untilCount"] == 10, f"snooze not stored: {detail}")
        expect([e["type"] for e in activity(group)][:3] == ["snoozed", "assigned", "comment"], "activity after snooze")
        browser.screenshot(os.path.join(SHOTS, "dashboard-triage.png"))

        # The list's bulk form: check the group among the ignored ones and resolve it.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes?status=ignored")
        expect(browser.js("!!document.querySelector('#bulk-form input[name=csrf]')?.value"), "bulk form without CSRF token")
        browser.js(f"document.querySelector('input[name=\"group[]\"][value=\"{group}\"]').checked = true")
        browser.js("document.querySelector('#bulk-form select[name=action]').value = 'resolve'")
        browser.load(lambda: browser.js("document.querySelector('#bulk-selected').click()"))
        expect(api(f"/v1/projects/{PROJECT}/crashes/{group}")["status"] == "resolved", "bulk resolve did not apply")
        expect(activity(group)[0]["type"] == "resolved", "bulk resolve wrote no entry")


if __name__ == "__main__":
    main()
