"""A headless browser for the cup site's tests (``aoe site``, issue #28).

Not a test module; ``tests/test_site.py`` imports its fixtures and helpers. Playwright drives
the Debian chromium that ``setup.sh`` installs (``/usr/bin/chromium``, or ``AOE_CHROMIUM``),
through ``executable_path``: no browser is ever downloaded. One browser per test session
(:func:`site_browser`, session-scoped); each :meth:`SiteBrowser.open_page` gets a fresh
context (its own viewport width, UTC, en-US, reduced motion) so pages cannot leak into each other.

What :meth:`SiteBrowser.open_page` records in its :class:`Problems` while the page lives:

- console messages of level error (``console.error``, a script or resource the browser refused),
- page errors (uncaught exceptions, unhandled rejections),
- requests that failed,
- every request whose URL is not a ``file://`` URL inside the site folder: the site must work
  from ``file://`` with no network, so those are aborted before they leave and recorded,
  WebSockets included (``data:`` and ``blob:`` URLs are the page's own and never reach the router),
- dialogs (``alert``, ``confirm``, ``prompt``: hostile agent text must never run), dismissed.

Skips with the reason when playwright or chromium is missing; on CI (``CI=true``)
``tests/conftest.py`` turns that skip into a failure, as for every missing requirement.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

#: the Debian chromium (``apt-get install chromium``, done by ``setup.sh``)
CHROMIUM = Path(os.environ.get("AOE_CHROMIUM", "/usr/bin/chromium"))
#: the viewport widths every page is checked at: a laptop and a phone
WIDTHS = (1280, 390)
VIEWPORT_HEIGHT = 800
#: how long a locator waits for an element by default (ms): a missing DOM hook fails in
#: seconds, not playwright's 30
DEFAULT_TIMEOUT_MS = 5_000

# Deterministic rendering for screenshot comparisons; no component updates, pings or
# other browser-level traffic (the page-level requests are what the router watches).
_ARGS = [
    "--no-sandbox",  # root in a container: chromium's sandbox needs user namespaces it may not get
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--font-render-hinting=none",
    "--force-color-profile=srgb",
    "--hide-scrollbars",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--no-pings",
]


@dataclass
class Problems:
    """What went wrong on one page (each a list of one-line descriptions)."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    #: console warnings: reported with the problems, but not problems themselves
    console_warnings: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return ([f"console error: {m}" for m in self.console_errors]
                + [f"page error: {m}" for m in self.page_errors]
                + [f"failed request: {m}" for m in self.failed_requests]
                + [f"request outside the site folder (aborted): {m}" for m in self.outside_requests]
                + [f"dialog: {m}" for m in self.dialogs])

    def __bool__(self) -> bool:
        return bool(self.all())

    def report(self) -> str:
        lines = self.all() + [f"(console warning: {m})" for m in self.console_warnings]
        return "\n".join(lines) if lines else "no problems"

    def assert_none(self, what: str = "page") -> None:
        assert not self, f"{what}:\n{self.report()}"


def file_inside(url: str, root: Path) -> bool:
    """True when ``url`` is a ``file://`` URL of a path inside ``root`` (after ``..`` and
    symbolic links resolve)."""
    u = urlparse(url)
    if u.scheme != "file" or u.netloc not in ("", "localhost"):
        return False
    try:
        return Path(unquote(u.path)).resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return False


def site_root_of(page_file: Path) -> Path:
    """The site folder a page belongs to: the nearest folder above it holding ``assets/``
    and ``index.html`` (the page's own folder for the home page)."""
    p = page_file.resolve().parent
    for d in (p, *p.parents):
        if (d / "assets").is_dir() and (d / "index.html").is_file():
            return d
    return p


class SiteBrowser:
    """The session's browser; :meth:`open_page` opens one page of a site."""

    def __init__(self, browser) -> None:  # noqa: ANN001 (playwright's Browser)
        self.browser = browser
        self._contexts: list = []

    def open_page(self, file_path: Path, width: int = 1280, *, root: Path | None = None,
                  height: int = VIEWPORT_HEIGHT, wait_until: str = "load"):
        """Open ``file_path`` (a page of a site in ``root``, default :func:`site_root_of`)
        in a new context ``width`` px wide; returns ``(page, problems)``. The problems
        list fills while the page lives (read it after the interactions)."""
        file_path = Path(file_path).resolve()
        root = (root or site_root_of(file_path)).resolve()
        problems = Problems()
        ctx = self.browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1,
                                       locale="en-US", timezone_id="UTC", color_scheme="light",
                                       reduced_motion="reduce", service_workers="block")
        self._contexts.append(ctx)
        outside: set[str] = set()

        def route(r) -> None:  # noqa: ANN001
            url = r.request.url
            if file_inside(url, root):
                r.continue_()
            else:
                outside.add(url)
                problems.outside_requests.append(f"{r.request.method} {url[:300]}")
                r.abort("blockedbyclient")

        ctx.route("**/*", route)

        def ws_route(ws) -> None:  # noqa: ANN001
            problems.outside_requests.append(f"WebSocket {ws.url[:300]}")
            ws.close()

        ctx.route_web_socket("**/*", ws_route)
        ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
        page = ctx.new_page()

        def on_console(msg) -> None:  # noqa: ANN001
            where = msg.location or {}
            text = f"{msg.text[:500]} ({where.get('url', '')}:{where.get('lineNumber', '')})"
            if msg.type == "error":
                problems.console_errors.append(text)
            elif msg.type == "warning":
                problems.console_warnings.append(text)

        def on_failed(req) -> None:  # noqa: ANN001
            if req.url not in outside:
                problems.failed_requests.append(f"{req.method} {req.url[:300]}: {req.failure}")

        def on_dialog(d) -> None:  # noqa: ANN001
            problems.dialogs.append(f"{d.type}: {d.message[:300]}")
            d.dismiss()

        page.on("console", on_console)
        page.on("pageerror", lambda err: problems.page_errors.append(str(err)[:1000]))
        page.on("requestfailed", on_failed)
        page.on("dialog", on_dialog)
        page.goto(file_path.as_uri(), wait_until=wait_until)
        page.evaluate("document.fonts.ready.then(() => true)")
        return page, problems

    def close_pages(self) -> None:
        """Close every context :meth:`open_page` opened."""
        for ctx in self._contexts:
            try:
                ctx.close()
            except Exception:  # noqa: BLE001 - already gone with its browser
                pass
        self._contexts.clear()


def launch_browser():
    """``(playwright, browser)``: the Debian chromium, headless; skips when it is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]', or ./setup.sh)")
    if not CHROMIUM.is_file() or not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium, or ./setup.sh; "
                    "AOE_CHROMIUM names another); the site's browser tests need it")
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=_ARGS,
                                     chromium_sandbox=False)
    except Exception:
        pw.stop()
        raise
    return pw, browser


@pytest.fixture(scope="module")
def site_browser() -> Iterator[SiteBrowser]:
    """One chromium for a test module's site tests, closed when the module ends: playwright's
    sync API keeps an event loop running in this thread while it is started, and asyncio
    tests after it (``asyncio.run``, pytest-asyncio) fail with "cannot be called from a
    running event loop" — so it never outlives the module that uses it."""
    pw, browser = launch_browser()
    sb = SiteBrowser(browser)
    try:
        yield sb
    finally:
        sb.close_pages()
        browser.close()
        pw.stop()


@pytest.fixture
def open_page(site_browser: SiteBrowser):
    """``open_page(file_path, width=1280, root=None) -> (page, problems)``; the test's
    pages are closed when it ends."""
    opened: list = []

    def _open(file_path: Path, width: int = 1280, **kw):
        page, problems = site_browser.open_page(file_path, width, **kw)
        opened.append(page.context)
        return page, problems

    yield _open
    for ctx in opened:
        try:
            ctx.close()
        except Exception:  # noqa: BLE001
            pass
        if ctx in site_browser._contexts:
            site_browser._contexts.remove(ctx)
