#!/usr/bin/env python3
"""The account pages in a real browser (accounts.md): headless Chromium against a real
crash-server, through test_browser's DevTools driver. A server admin made by
`crash-server user create --admin` opens the printed set-up link and chooses a password,
signs out, signs in by password (after a wrong one), picks the project in the project
switcher, adds a teammate on the Members page, changes the teammate's role and removes them,
makes an API token on the Tokens page (shown once; it works on the API within its scopes),
revokes it (the API refuses it at once) and signs out. No console error or CSP violation
may show.

Usage: test_accounts_browser.py BASE_URL INGEST_KEY READ_TOKEN PROJECT SCREENSHOT_DIR SETUP_PATH ADMIN_EMAIL TEAMMATE_EMAIL
"""
import json
import os
import sys
import urllib.error
import urllib.request

from test_browser import BASE, PROJECT, SHOTS, browser_test, expect

SETUP_PATH, ADMIN, TEAMMATE = sys.argv[6:9]
PASSWORD = "correct horse battery staple"


def status(path, token):
    """The status of a GET with `Authorization: Bearer token`."""
    request = urllib.request.Request(BASE + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def text(browser, selector):
    return browser.js(f"document.querySelector({json.dumps(selector)})?.textContent.trim() ?? null")


def fill(browser, selector, value):
    browser.js(f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}")


def submit(browser, form_selector):
    browser.load(lambda: browser.js(f"document.querySelector({json.dumps(form_selector)}).requestSubmit()"))


def path(browser):
    return browser.js("location.pathname")


def member_roles(browser):
    rows = browser.js("[...document.querySelectorAll('#member-list .member-row')].map(r => [...r.cells].map(c => c.textContent.trim()))")
    return {row[0]: row[2] for row in rows or []}


def set_member(browser, email, role):
    fill(browser, "#member-email", email)
    fill(browser, "#member-role", role)
    submit(browser, "#member-form")
    expect(text(browser, "#members-notice") == "Saved.", f"no notice after setting {email} {role}")


def password_sign_in(browser, password):
    browser.goto(BASE + "/")
    fill(browser, "#email", ADMIN)
    fill(browser, "#password", password)
    submit(browser, "#password-form")


def main():
    with browser_test("dashboard accounts browser test") as browser:
        # The set-up link: choose a password, signed in at once.
        browser.goto(BASE + SETUP_PATH)
        expect(text(browser, "#setup-email") == ADMIN, f"set-up page for {text(browser, '#setup-email')!r}")
        fill(browser, "#password", PASSWORD)
        submit(browser, "#setup-form")
        expect(ADMIN in (text(browser, "#signed-in-as") or ""), f"not signed in after set-up: {path(browser)}")
        submit(browser, "form[action='/signout']")
        expect(browser.js("!!document.querySelector('#password-form')"), "sign-out did not show the sign-in page")
        # The link works once.
        browser.goto(BASE + SETUP_PATH)
        expect(browser.js("!document.querySelector('#setup-form')"), "the set-up link worked twice")

        # Password sign-in: a wrong password is refused, the right one opens the switcher.
        password_sign_in(browser, "not the password at all")
        expect(text(browser, "#signin-error") == "Wrong e-mail or password.", f"wrong password: {text(browser, '#signin-error')!r}")
        password_sign_in(browser, PASSWORD)
        expect(text(browser, "#signed-in-as") == f"Signed in as {ADMIN} (server admin)", f"switcher: {text(browser, '#signed-in-as')!r}")
        projects = browser.js("[...document.querySelectorAll('#project-list .project-row a')].map(a => a.textContent)") or []
        expect(PROJECT in projects, f"{PROJECT} not in the project switcher: {projects}")
        browser.screenshot(os.path.join(SHOTS, "dashboard-projects.png"))
        browser.load(lambda: browser.js(f"[...document.querySelectorAll('#project-list a')].find(a => a.textContent === {json.dumps(PROJECT)}).click()"))
        expect(path(browser).startswith(f"/projects/{PROJECT}"), f"the switcher opened {path(browser)}")

        # Members: add the teammate, change the role, remove.
        browser.load(lambda: browser.js("document.querySelector('#members-link').click()"))
        expect(path(browser) == f"/projects/{PROJECT}/members", f"members link opened {path(browser)}")
        expect(TEAMMATE not in member_roles(browser), "the teammate is a member before being added")
        set_member(browser, TEAMMATE, "member")
        expect(member_roles(browser).get(TEAMMATE) == "member", f"after adding: {member_roles(browser)}")
        set_member(browser, TEAMMATE, "viewer")
        expect(member_roles(browser).get(TEAMMATE) == "viewer", f"after the change: {member_roles(browser)}")
        browser.screenshot(os.path.join(SHOTS, "dashboard-members.png"))
        browser.load(lambda: browser.js(
            f"[...document.querySelectorAll('#member-list .member-row')].find(r => r.cells[0].textContent.trim() === {json.dumps(TEAMMATE)})"
            ".querySelector('form').requestSubmit()"))
        expect(TEAMMATE not in member_roles(browser), f"after removing: {member_roles(browser)}")

        # Tokens: made on the page, shown once, works within its scopes, revoked.
        browser.load(lambda: browser.js("document.querySelector('#tokens-link').click()"))
        expect(path(browser) == "/tokens", f"tokens link opened {path(browser)}")
        fill(browser, "#token-name", "browser ci")
        fill(browser, "#token-project", PROJECT)
        browser.js("document.querySelector('input[name=projectTriage]').checked = true")
        submit(browser, "#token-form")
        secret = text(browser, "#new-token") or ""
        expect(secret.startswith("cgt_"), f"no new token shown: {secret!r}")
        expect(status(f"/v1/projects/{PROJECT}/crashes", secret) == 200, "the new token cannot read its project")
        expect(status(f"/v1/projects/{PROJECT}/members", secret) == 403, "the new token has a scope it was not given")
        browser.goto(BASE + "/tokens")
        expect(browser.js("!document.querySelector('#new-token')"), "the token was shown twice")
        rows = browser.js("[...document.querySelectorAll('#token-list .token-row')].map(r => r.cells[0].textContent)") or []
        expect(rows.count("browser ci") == 1, f"token rows: {rows}")
        browser.load(lambda: browser.js(
            "[...document.querySelectorAll('#token-list .token-row')].find(r => r.cells[0].textContent === 'browser ci')"
            ".querySelector('form').requestSubmit()"))
        expect(status(f"/v1/projects/{PROJECT}/crashes", secret) == 401, "the revoked token still works")
        expect(browser.js("!document.querySelector('#token-list')"), "the revoked token is still listed")

        # Sign-out (the project switcher's form) ends the session: the pages ask to sign in again.
        browser.goto(BASE + "/")
        submit(browser, "form[action='/signout']")
        browser.goto(BASE + "/tokens")
        expect(browser.js("!document.querySelector('#token-form')"), "the tokens page opened after sign-out")
        browser.goto(BASE + "/")
        expect(browser.js("!!document.querySelector('#password-form')"), "no sign-in page after sign-out")


if __name__ == "__main__":
    main()
