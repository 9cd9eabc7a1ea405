#!/usr/bin/env python3
"""The dashboard's merge panel in a real browser (triage.md, "Merge and unmerge"): headless
Chromium against a real crash-server, through test_browser's DevTools driver. On two groups of
its own it merges one into the other by picking the target in the crash page's select, checks
the target's page and the REST API (the target counts both groups' reports, the source is not
listed and names its target), then unmerges with the target page's button. Every POST form
carries the CSRF token; any console error or CSP violation fails.

Usage: test_merge_browser.py BASE_URL INGEST_KEY READ_TOKEN PROJECT SCREENSHOT_DIR
"""
import json
import os
import uuid
from datetime import datetime, timedelta, timezone

from test_browser import BASE, PROJECT, SHOTS, api, browser_test, expect, post_reports, rfc3339

SOURCE = "MergeBrowserCheck failed in basket (copy)"
TARGET = "MergeBrowserCheck failed in basket"


def group(title):
    return next(g for g in api(f"/v1/projects/{PROJECT}/crashes?limit=200")["groups"] if g["title"] == title)


def main():
    now = datetime.now(timezone.utc)
    post_reports([{
        "id": str(uuid.uuid4()), "timestamp": rfc3339(now - timedelta(minutes=n)), "kind": "custom", "reason": reason,
        "app": {"id": "com.example.shop", "version": "2.4.0"}, "device": {"os": "iOS", "id": f"device-m{n}"},
    } for n, reason in [(3, SOURCE), (4, SOURCE), (5, TARGET)]])
    source, target = group(SOURCE)["id"], group(TARGET)["id"]
    with browser_test("dashboard merge browser test", sign_in=True) as browser:
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes/{source}")
        missing = browser.js("[...document.querySelectorAll('form[method=post]')]"
                             ".filter(f => !(f.querySelector('input[name=csrf]')?.value)).map(f => f.id)")
        expect(missing == [], f"crash page: POST forms without a CSRF token: {missing}")
        options = browser.js("[...document.querySelectorAll('#merge-into option')].map(o => o.value)")
        expect(target in options and source not in options, f"merge targets offered: {options}")

        # Merge: pick the target and submit; the browser lands on the target's page.
        browser.js(f"document.querySelector('#merge-into').value = {json.dumps(target)}")
        browser.load(lambda: browser.js("document.querySelector('#merge-form').submit()"))
        expect(browser.js("location.pathname") == f"/projects/{PROJECT}/crashes/{target}", "not on the target's page")
        shown = browser.js("[...document.querySelectorAll('#merge .merged-group input[name=group]')].map(i => i.value)")
        expect(shown == [source], f"the target's page does not list the merged group: {shown}")
        merged = api(f"/v1/projects/{PROJECT}/crashes/{target}")
        expect(merged["count"] == 3 and merged["merged"] == [source], f"target after merge: {merged}")
        expect(api(f"/v1/projects/{PROJECT}/crashes/{source}")["mergedInto"] == target, "source does not name its target")
        titles = [g["title"] for g in api(f"/v1/projects/{PROJECT}/crashes?limit=200")["groups"]]
        expect(SOURCE not in titles, "a merged group is still listed")
        browser.screenshot(os.path.join(SHOTS, "dashboard-merge.png"))

        # The source's page says where it went and offers no merge form.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes/{source}")
        expect(browser.js("!!document.querySelector('#merged-into') && !document.querySelector('#merge-form')"),
               "the merged group's page does not show its target")

        # Unmerge from the target's page.
        browser.goto(f"{BASE}/projects/{PROJECT}/crashes/{target}")
        browser.load(lambda: browser.js("document.querySelector('#merge .merged-group button').click()"))
        expect(api(f"/v1/projects/{PROJECT}/crashes/{source}")["mergedInto"] is None, "unmerge did not apply")
        expect(group(SOURCE)["count"] == 2 and group(TARGET)["count"] == 1, "counts after unmerge")


if __name__ == "__main__":
    main()
