"""The site tests' browser harness (``tests/site_browser.py``) catches what it promises to:
requests leaving the site folder (aborted, none reaches the network), console errors,
uncaught exceptions, failed requests and dialogs; a clean page has no problem."""

from __future__ import annotations

from pathlib import Path

from site_browser import file_inside, open_page, site_browser, site_root_of  # noqa: F401 (fixtures)


def _site(tmp_path: Path, body: str) -> Path:
    root = tmp_path / "site"
    (root / "assets").mkdir(parents=True)
    (root / "assets" / "site.css").write_text("body { margin: 0 }")
    (root / "assets" / "site.js").write_text("document.body.dataset.ready = '1';")
    (tmp_path / "secret.txt").write_text("outside the site")
    page = root / "index.html"
    page.write_text(f"<!doctype html><html><head><link rel=stylesheet href=assets/site.css></head>"
                    f"<body data-page=home>{body}<script src=assets/site.js></script></body></html>")
    return page


def test_clean_page_has_no_problems(tmp_path, open_page):
    page_file = _site(tmp_path, "<p id=x>fine</p>")
    page, problems = open_page(page_file, 390)
    assert page.text_content("#x") == "fine"
    assert page.get_attribute("body", "data-ready") == "1"
    assert page.viewport_size["width"] == 390
    problems.assert_none()


def test_every_kind_of_problem_is_recorded(tmp_path, open_page):
    page_file = _site(tmp_path, """
        <img src="https://example.invalid/x.png">
        <img src="../secret.txt">
        <img src="assets/missing.png">
        <script>console.error("boom"); alert("hi"); fetch("http://127.0.0.1:9/x").catch(() => {});
                setTimeout(() => { throw new Error("uncaught one") }, 0);</script>""")
    page, problems = open_page(page_file)
    page.wait_for_timeout(200)
    text = problems.report()
    assert any("example.invalid" in m for m in problems.outside_requests), text
    assert any("secret.txt" in m for m in problems.outside_requests), text
    assert any("127.0.0.1:9" in m for m in problems.outside_requests), text
    assert any("missing.png" in m for m in problems.failed_requests + problems.console_errors), text
    assert any("boom" in m for m in problems.console_errors), text
    assert any("uncaught one" in m for m in problems.page_errors), text
    assert problems.dialogs == ["alert: hi"], text
    assert problems


def test_file_inside(tmp_path):
    root = tmp_path / "site"
    (root / "heats").mkdir(parents=True)
    assert file_inside((root / "heats" / "a b.html").as_uri(), root)
    assert not file_inside((root / ".." / "x.html").as_uri(), root)
    assert not file_inside((tmp_path / "x.html").as_uri(), root)
    assert not file_inside("https://example.com/", root)
    assert not file_inside("file://otherhost/etc/passwd", root)
    (root / "assets").mkdir()
    (root / "index.html").write_text("")
    assert site_root_of(root / "heats" / "r1" / "index.html") == root.resolve()
