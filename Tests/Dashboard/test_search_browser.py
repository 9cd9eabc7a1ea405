#!/usr/bin/env python3
"""The crashes page's search box and environment selector in a real browser (triage.md,
"Search"): headless Chromium against a real crash-server, through test_browser's DevTools
driver. Seeds groups of its own in two environments, then searches through the page's form
(no JavaScript needed by the page: the test only fills and submits it) and checks the rows
against the REST list with the same `q`; a search with markup is written back escaped, a bad
one answers 400 naming `q`, and no console error or CSP violation shows.

Usage: test_search_browser.py BASE_URL INGEST_KEY READ_TOKEN PROJECT SCREENSHOT_DIR
"""
import json
import os
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone

from test_browser import BASE, PROJECT, SHOTS, api, browser_test, expect, post_reports, rfc3339

# Letters only: a number in a reason is normalized to <n> in the title.
TAG = "".join(chr(ord("a") + int(c, 16) % 26) for c in uuid.uuid4().hex[:10])
STAGING = f"staging-{TAG}"


def report(reason, environment=None, context=None, minutes=5):
    r = {
        "id": str(uuid.uuid4()), "timestamp": rfc3339(datetime.now(timezone.utc) - timedelta(minutes=minutes)),
        "kind": "custom", "reason": reason, "app": {"id": "com.example.shop", "version": "2.4.0"},
        "device": {"os": "iOS", "id": "device-s"},
    }
    if environment:
        r["environment"] = environment
    if context:
        r["context"] = context
    return r


def rows(browser):
    return browser.js("[...document.querySelectorAll('#crash-table .crash-link')].map(a => a.textContent)") or []


def search(browser, q, environment=""):
    """Fills the filter form's search box and environment selector and submits it."""
    browser.goto(f"{BASE}/projects/{PROJECT}/crashes")
    browser.js(f"document.querySelector('#search').value = {json.dumps(q)}")
    browser.js(f"document.querySelector('#environment').value = {json.dumps(environment)}")
    browser.load(lambda: browser.js("document.querySelector('#filters').submit()"))


def main():
    checkout, login, sync = f"SearchCheck {TAG} checkout", f"SearchCheck {TAG} login", f"SearchCheck {TAG} sync"
    post_reports([
        report(checkout, context={"screen": "checkout"}),
        report(checkout, environment=STAGING, context={"screen": "cart"}),
        report(login, environment=STAGING),
        report(sync),
    ])
    with browser_test("dashboard search browser test", sign_in=True) as browser:
        # A free word and a context term: the page lists what the API lists for the same q.
        q = f'"SearchCheck {TAG}" screen:checkout'
        search(browser, q)
        expect(rows(browser) == [checkout], f"search {q!r}: rows {rows(browser)} at {browser.js('location.href')}")
        listed = api(f"/v1/projects/{PROJECT}/crashes?q={urllib.parse.quote(q)}")["groups"]
        expect([g["title"] for g in listed] == [checkout], f"REST list for {q!r}: {listed}")
        expect(browser.js("document.querySelector('#search').value") == q, "the search box lost its text")

        # The environment selector lists the seeded environment and narrows the list.
        options = browser.js("[...document.querySelectorAll('#environment option')].map(o => o.value)") or []
        expect(STAGING in options and "production" in options, f"environment options: {options}")
        search(browser, f"SearchCheck {TAG}", STAGING)
        expect(sorted(rows(browser)) == sorted([checkout, login]), f"environment {STAGING}: rows {rows(browser)}")
        expect(f"environment={STAGING}" in browser.js("location.search"), "environment not in the page's URL")
        expect(browser.js("document.querySelector('#environment').value") == STAGING, "environment not selected")
        counts = browser.js("[...document.querySelectorAll('#crash-table .count')].map(td => td.textContent.trim())")
        expect(counts == ["1", "1"], f"counts within {STAGING}: {counts}")
        browser.screenshot(os.path.join(SHOTS, "dashboard-search.png"))

        # Negation and a group term; a search with markup comes back escaped in the box.
        search(browser, f"SearchCheck {TAG} !login !\"sync\"")
        expect(rows(browser) == [checkout], f"negated terms: rows {rows(browser)}")
        marked = f'"<b>{TAG}</b>"'
        search(browser, marked)
        expect(not browser.js("!!document.querySelector('form#filters b')"), "the search text's markup was rendered")
        expect(browser.js("document.querySelector('#search').value") == marked, "the search text was not written back")

        # A bad search is a 400 naming q, not an unfiltered list.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes?q={urllib.parse.quote('is:nothing')}")
        text = browser.js("document.body.textContent") or ""
        expect("q: is:nothing" in text, f"bad search page: {text[:200]!r}")


if __name__ == "__main__":
    main()
