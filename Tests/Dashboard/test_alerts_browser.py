#!/usr/bin/env python3
"""The dashboard's alert rules page in a real browser (alerts.md): headless Chromium against a
real crash-server, through test_browser's DevTools driver. With the project's read token it
opens the page from the project's navigation, creates a rule through the form (a refused one
first: the page shows the API's message naming the field), edits it, disables and enables it,
and deletes it; asserts on the page and on the REST API after each step, checks that every POST
form carries the CSRF token, and fails on any console error or CSP violation. Plain forms only:
JavaScript here fills fields and submits, as a person would with the keyboard.

Usage: test_alerts_browser.py BASE_URL INGEST_KEY READ_TOKEN PROJECT SCREENSHOT_DIR
"""
import json
import os

from test_browser import PROJECT, SHOTS, api, browser_test, expect

NAME = 'Checkout <b>crashes</b> "2.x"'


def rules():
    return api(f"/v1/projects/{PROJECT}/alert-rules")["rules"]


def mine():
    return [r for r in rules() if r["name"] in (NAME, NAME + " edited")]


def fill(browser, values):
    for field, value in values.items():
        browser.js(f"document.querySelector('#rule-form [name={json.dumps(field)}]').value = {json.dumps(value)}")


def main():
    hook = api(f"/v1/projects/{PROJECT}/webhooks", "POST", {"url": "https://example.com/alerts-browser", "events": []})["id"]
    with browser_test("dashboard alert rules browser test", sign_in=True) as browser:
        browser.load(lambda: browser.js("document.querySelector('#alerts-link').click()"))
        expect(browser.js("location.pathname") == f"/projects/{PROJECT}/alerts", "the Alerts link does not open the rules page")
        missing = browser.js("[...document.querySelectorAll('form[method=post]')]"
                             ".filter(f => !(f.querySelector('input[name=csrf]')?.value)).map(f => f.id)")
        expect(missing == [], f"rules page: POST forms without a CSRF token: {missing}")

        # Refused: a frequency rule without its count; the API's message, nothing stored.
        fill(browser, {"name": NAME, "type": "frequency", "windowMinutes": "60", "version": "2.0.0, 2.0.1"})
        browser.js(f"document.querySelector('#rule-form input[name=\"webhook[]\"][value=\"{hook}\"]').checked = true")
        browser.load(lambda: browser.js("document.querySelector('#rule-form').submit()"))
        error = browser.js("document.querySelector('#alerts-error')?.textContent") or ""
        expect(error.startswith("when.count:"), f"refused form: {error!r}")
        expect(browser.js("document.querySelector('#rule-name').value") == NAME, "the refused form lost its values")
        expect(mine() == [], "a refused form stored a rule")

        # Created.
        fill(browser, {"count": "50"})
        browser.load(lambda: browser.js("document.querySelector('#rule-form').submit()"))
        stored = mine()
        expect(len(stored) == 1, f"rule not created: {stored}")
        rule = stored[0]
        expect(rule["when"] == {"type": "frequency", "count": 50, "windowMinutes": 60}, f"when: {rule['when']}")
        expect(rule["filters"] == {"version": ["2.0.0", "2.0.1"]}, f"filters: {rule['filters']}")
        expect(rule["actions"] == [{"type": "webhook", "webhook": hook}], f"actions: {rule['actions']}")
        expect(rule["enabled"] is True and rule["throttleMinutes"] == 30, f"defaults: {rule}")
        row = f"#rule-list tr[data-rule=\"{rule['id']}\"]"
        expect(NAME in (browser.js(f"document.querySelector('{row}')?.textContent") or ""), "the new rule is not listed")
        expect(not browser.js("!!document.querySelector('#rule-list b')"), "the rule's name was rendered as markup")
        browser.screenshot(os.path.join(SHOTS, "dashboard-alerts.png"))

        # Edited: the form comes filled in.
        browser.load(lambda: browser.js(f"document.querySelector('{row} a.rule-edit').click()"))
        expect(browser.js("document.querySelector('#rule-count').value") == "50", "the edit form is not filled in")
        fill(browser, {"name": NAME + " edited", "throttleMinutes": "60"})
        browser.load(lambda: browser.js("document.querySelector('#rule-form').submit()"))
        edited = api(f"/v1/projects/{PROJECT}/alert-rules/{rule['id']}")
        expect(edited["name"] == NAME + " edited" and edited["throttleMinutes"] == 60, f"edit not stored: {edited}")
        expect(edited["when"]["count"] == 50, f"edit lost the trigger: {edited['when']}")

        # Disabled, enabled.
        browser.load(lambda: browser.js(f"document.querySelector('{row} .rule-toggle').click()"))
        expect(api(f"/v1/projects/{PROJECT}/alert-rules/{rule['id']}")["enabled"] is False, "not disabled")
        expect(browser.js(f"document.querySelector('{row} .rule-state').textContent") == "disabled", "disabled not shown")
        browser.load(lambda: browser.js(f"document.querySelector('{row} .rule-toggle').click()"))
        expect(api(f"/v1/projects/{PROJECT}/alert-rules/{rule['id']}")["enabled"] is True, "not enabled again")

        # Deleted.
        browser.load(lambda: browser.js(f"document.querySelector('{row} .rule-delete').click()"))
        expect(mine() == [], "rule not deleted")
        expect(not browser.js(f"!!document.querySelector('{row}')"), "the deleted rule is still listed")


if __name__ == "__main__":
    main()
