"""The course website (tools/site.py) in Debian's Chromium: offline, complete, working.

The site is served from build/site/ on 127.0.0.1. Every page is visited while every
request the browser makes is recorded: any request to another host fails the test (the
site must work behind a firewall and offline), as does any console error, any math left
as raw ``$...$``, and any image that did not load. The attention explorer is then used on
the lesson 09 page with no kernel at all, and its click-to-update latency is printed.
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

from course_utils.views.explorer_model import explorer_state
from tests.support.browser import (
    CLICK_LATENCY_JS,
    check_live_view,
    pronoun_example_of,
    served,
)
from tools import site, site_font
from tools.lessons import EDITIONS, NOTEBOOK_DIR, ROOT, lesson_heading, lesson_paths

LATENCY_CLICKS = 20
LATENCY_TARGET_MS = 50
BUILD_BUDGET_S = 120
SITE_INPUTS = [ROOT / "site", ROOT / "tools" / "site.py", ROOT / "tools" / "site_font.py",
               NOTEBOOK_DIR, ROOT / "README.md", ROOT / "README.zh-CN.md"]
# Where each edition's pages are, relative to the site's root.
PREFIX = {"en": "", "zh-CN": "zh-CN/"}


def _newest_input() -> float:
    return max(p.stat().st_mtime for root in SITE_INPUTS for p in [root, *root.rglob("*")])


@pytest.fixture(scope="module")
def site_dir() -> Path:
    """build/site/, rebuilt when a notebook or the site's sources are newer than it."""
    index = site.OUTPUT / "index.html"
    if not index.exists() or index.stat().st_mtime < _newest_input():
        start = time.monotonic()
        site.build()
        elapsed = time.monotonic() - start
        assert elapsed <= BUILD_BUDGET_S, f"building the site took {elapsed:.0f} s"
    return site.OUTPUT


@pytest.fixture(scope="module")
def server(site_dir):
    with served(site_dir) as url:
        yield url.rstrip("/")


@pytest.fixture(scope="module")
def browser(server, chromium):
    return chromium


class Visit:
    """One page opened with every request, console error and page error recorded."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("requestfailed", lambda r: self.errors.append(f"failed: {r.url}"))
        self.page.on("response", lambda r: r.status >= 400
                     and self.errors.append(f"HTTP {r.status}: {r.url}"))
        self.page.goto(url, wait_until="networkidle")

    def outside_requests(self) -> list[str]:
        return [url for url in self.requests
                if urlparse(url).scheme not in ("data", "blob", "about")
                and urlparse(url).hostname not in ("127.0.0.1", "localhost")]

    def close(self) -> None:
        self.context.close()


MATH_RENDERED_JS = """async () => {
    // On a busy machine MathJax may still be loading when the page is idle: give it time to
    // start (its startup promise appears once tex-chtml.js runs), then wait for the typeset.
    const deadline = Date.now() + 30000;
    const hasMath = document.querySelector('span.math, div.math') !== null;
    while (hasMath && !(window.MathJax && MathJax.startup && MathJax.startup.promise)
           && Date.now() < deadline) {
        await new Promise(done => setTimeout(done, 100));
    }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;
        if (MathJax.typesetPromise) { await MathJax.typesetPromise(); }  // any typeset pending
    }
    const math = [...document.querySelectorAll('span.math, div.math')];
    return {
        total: math.length,
        unrendered: math.filter(e => !e.querySelector('mjx-container'))
                        .map(e => e.textContent.slice(0, 60)),
    };
}"""

# Text outside code and outputs that still looks like TeX between dollars.
RAW_MATH_JS = """() => {
    const article = document.querySelector('article') || document.body;
    const clone = article.cloneNode(true);
    clone.querySelectorAll('pre, code, .output, .cell_output, mjx-container, script, style')
        .forEach(e => e.remove());
    const text = clone.textContent;
    return (text.match(/\\$\\$?[^$\\s][^$]*?\\$/g) || []).concat(
        text.match(/\\\\\\(|\\\\\\[|\\\\frac|\\\\sqrt/g) || []);
}"""

IMAGES_JS = """async () => {
    const images = [...document.images];
    for (const img of images) { img.scrollIntoView(); }
    await Promise.all(images.map(img => img.complete ? null :
        new Promise(done => { img.onload = img.onerror = done; })));
    return images.filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.src);
}"""


def page_paths(site_dir: Path) -> list[str]:
    return sorted(p.relative_to(site_dir).as_posix() for p in site_dir.rglob("*.html")
                  if "_static" not in p.parts)


# axe-core (npm, pinned in package.json; tools/course.py's ensure_node_tools installs it) is
# read from node_modules and injected into each page: nothing comes from another host.
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_JS = """async (tags) => {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;  // the typeset math is part of the page checked
    }
    const result = await axe.run(document, {runOnly: {type: 'tag', values: tags},
                                            resultTypes: ['violations']});
    return result.violations.map(v => ({rule: v.id, impact: v.impact,
        targets: v.nodes.map(n => n.target.join(' '))}));
}"""


def test_every_page_is_offline_clean_rendered_complete_and_accessible(browser, server, site_dir,
                                                                      capsys):
    """One visit per page of both editions: nothing from another host, no console error, math
    rendered, every image loaded, and axe-core's WCAG 2.0/2.1 A and AA rules with no violation
    (named by page, rule and elements). One visit serves both, since loading a lesson page and
    typesetting its math is most of the time either check takes."""
    if not AXE.exists():
        pytest.fail(f"{AXE.relative_to(ROOT)} is missing: run `npm ci`", pytrace=False)
    axe = AXE.read_text(encoding="utf-8")
    pages = page_paths(site_dir)
    lessons = [f"{PREFIX[edition]}{site.LESSONS}/{name}.html" for edition in EDITIONS
               for name in site._lesson_names(edition)]
    assert set(lessons) <= set(pages), f"lesson pages missing: {set(lessons) - set(pages)}"
    problems, violations, math_count, start = [], [], 0, time.monotonic()
    for path in pages:
        visit = Visit(browser, f"{server}/{path}")
        try:
            math = visit.page.evaluate(MATH_RENDERED_JS)
            math_count += math["total"]
            for label, found in (
                ("requests to other hosts", visit.outside_requests()),
                ("console or page errors", visit.errors),
                ("math not rendered", math["unrendered"]),
                ("raw TeX left in the text", visit.page.evaluate(RAW_MATH_JS)),
                ("images that did not load", visit.page.evaluate(IMAGES_JS)),
            ):
                if found:
                    problems.append(f"{path}: {label}: {found[:5]}")
            visit.page.add_script_tag(content=axe)
            violations += [f"{path}: {v['rule']} ({v['impact']}, {len(v['targets'])} elements): "
                           f"{v['targets'][:3]}" for v in visit.page.evaluate(AXE_JS, AXE_TAGS)]
        finally:
            visit.close()
    with capsys.disabled():
        print(f"\n{len(pages)} pages visited, axe-core included: {time.monotonic() - start:.0f} s")
    assert not problems, "\n".join(problems)
    assert math_count > 0, "no math found on any page: is MathJax wired up?"
    assert not violations, f"{len(violations)} axe-core violations:\n" + "\n".join(violations)


def test_every_page_links_to_the_same_page_in_the_other_edition(site_dir):
    pages = page_paths(site_dir)
    assert any(p.startswith("zh-CN/") for p in pages) and any(
        not p.startswith("zh-CN/") for p in pages)
    for page in pages:
        html = (site_dir / page).read_text()
        links = re.findall(r'class="course-language-other" href="([^"]+)"', html)
        assert len(links) == 1, f"{page}: {len(links)} language switches"
        twin = (site_dir / page).parent.joinpath(links[0]).resolve()
        expected = (site_dir / (page.removeprefix("zh-CN/") if page.startswith("zh-CN/")
                                else f"zh-CN/{page}")).resolve()
        assert twin == expected and twin.exists(), f"{page}: switch leads to {links[0]}"


# The subset Noto Sans SC measured 149 KB as WOFF2 for the eleven lessons' characters.
FONT_BUDGET_BYTES = 600_000


@pytest.mark.parametrize("edition", EDITIONS)
def test_an_edition_whose_script_a_machine_may_lack_carries_every_glyph_it_shows(
        site_dir, edition):
    from fontTools.ttLib import TTFont

    font = site_dir / PREFIX[edition] / "_static" / site_font.FONT_FILE
    if not site_font.has_web_font(edition):
        assert not font.exists(), f"the {edition} pages need no font of their own"
        return
    shown = site_font.characters_shown(site_dir / PREFIX[edition])
    glyphs = TTFont(font).getBestCmap()
    missing = sorted(c for c in shown if ord(c) not in glyphs)
    assert len(shown) > 500 and not missing, f"{len(shown)} shown, missing: {missing[:20]}"
    assert font.stat().st_size < FONT_BUDGET_BYTES, font.stat().st_size
    assert (font.parent / "OFL.txt").exists(), "the font's licence travels with it"


# Every CJK ideograph drawn on the page is a full em wide, as Noto Sans SC draws them; a
# fallback's .notdef box (what a machine without a CJK font shows) is about half that.
# (Punctuation is left out: Chromium's text-spacing-trim draws some of it half wide.)
NOTDEF_BOXES_JS = """() => {
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const narrow = []; let measured = 0;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const size = parseFloat(getComputedStyle(node.parentElement).fontSize);
        for (const match of node.data.matchAll(/[\u4e00-\u9fff]/g)) {
            const range = document.createRange();
            range.setStart(node, match.index); range.setEnd(node, match.index + 1);
            const width = range.getBoundingClientRect().width;
            if (width === 0) { continue; }  // not displayed (a closed menu, a hidden cell)
            measured += 1;
            if (width < 0.9 * size) {
                narrow.push(`${match[0]} in "${node.data.trim().slice(0, 30)}": ${width}px`);
            }
        }
    }
    return {measured, narrow: narrow.slice(0, 10)};
}"""


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_pages_draw_cjk_text_with_their_own_font_only_where_they_carry_one(
        browser, server, edition):
    visit = Visit(browser, f"{server}/{PREFIX[edition]}{site.LESSONS}/"
                           f"{site._lesson_names(edition)[1]}.html")
    try:
        used = visit.page.evaluate("""async () => { await document.fonts.ready;
            return [...document.fonts].filter(f => f.status === 'loaded')
                                      .map(f => f.family.replace(/"/g, ''));}""")
        boxes = visit.page.evaluate(NOTDEF_BOXES_JS)
        fetched = [url for url in visit.requests if url.endswith(site_font.FONT_FILE)]
    finally:
        visit.close()
    if site_font.has_web_font(edition):
        assert site_font.FAMILY in used and fetched and not visit.errors, (used, visit.errors)
        assert boxes["measured"] > 100 and not boxes["narrow"], boxes
        assert urlparse(fetched[0]).hostname == "127.0.0.1"
    else:
        assert site_font.FAMILY not in used and not fetched


@pytest.mark.parametrize("edition", EDITIONS)
def test_landing_page_lists_every_lesson_in_order_with_badge_and_link(browser, server, edition):
    visit = Visit(browser, f"{server}/{PREFIX[edition]}index.html")
    try:
        rows = visit.page.evaluate("""() => [...document.querySelectorAll(
            'table.course-lessons tbody tr')].map(tr => ({
                number: tr.cells[0].innerText.trim(),
                href: tr.cells[1].querySelector('a').getAttribute('href'),
                colab: tr.cells[3].querySelector('a').href,
                badge: tr.cells[3].querySelector('img').src,
            }))""")
        sidebar = visit.page.evaluate("""() => [...document.querySelectorAll(
            '.sidebar-tree a.reference.internal')].map(a => a.getAttribute('href'))""")
    finally:
        visit.close()
    names = site._lesson_names(edition)
    assert [row["href"] for row in rows] == [f"{site.LESSONS}/{n}.html" for n in names]
    assert [row["number"] for row in rows] == [
        lesson_heading(nbformat.read(p, as_version=4))[0] for p in lesson_paths(edition)]
    for row, path in zip(rows, lesson_paths(edition), strict=True):
        assert row["colab"].startswith("https://colab.research.google.com/github/")
        assert row["colab"].endswith(path.relative_to(ROOT).as_posix())
        assert urlparse(row["badge"]).hostname == "127.0.0.1"
    # The sidebar: the lessons in order, then the claims audit's page.
    assert [h.removesuffix(".html") for h in sidebar] == [
        *(f"{site.LESSONS}/{n}" for n in names), site.CLAIMS_PAGE]


@pytest.mark.parametrize("edition", EDITIONS)
def test_lesson_pages_have_navigation_and_a_download_of_the_committed_notebook(
        browser, server, site_dir, edition):
    import urllib.request

    names = site._lesson_names(edition)
    for position, (name, path) in enumerate(zip(names, lesson_paths(edition), strict=True)):
        html = (site_dir / PREFIX[edition] / site.LESSONS / f"{name}.html").read_text()
        downloads = re.findall(r'href="([^"]*_downloads/[^"]+\.ipynb)"', html)
        assert downloads, f"{name}: no download link"
        url = f"{server}/{PREFIX[edition]}{site.LESSONS}/{downloads[0]}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.read() == path.read_bytes(), f"{name}: download differs"
        assert "colab.research.google.com/github/" in html, f"{name}: no Colab link"
        if position + 1 < len(names):
            assert 'class="next-page"' in html, f"{name}: no link to the next lesson"
        if position > 0:
            assert 'class="prev-page"' in html, f"{name}: no link to the previous lesson"


@pytest.mark.parametrize(("edition", "word"), [("en", "softmax"), ("zh-CN", "掩码")])
def test_search_finds_a_lesson_offline(browser, server, edition, word):
    visit = Visit(browser, f"{server}/{PREFIX[edition]}search.html?q={word}")
    try:
        visit.page.wait_for_selector("#search-results ul.search li", timeout=20_000)
        hits = visit.page.evaluate(
            "() => [...document.querySelectorAll('#search-results ul.search li a')]"
            ".map(a => a.getAttribute('href'))")
        assert any(site.LESSONS in hit for hit in hits), hits
        assert not visit.outside_requests(), visit.outside_requests()
        assert not visit.errors, visit.errors
    finally:
        visit.close()


# --- the attention explorer on the static site (no kernel) -----------------------------------



def shown_row(page, selector: str = ".attn-explorer") -> dict:
    return page.evaluate("""(selector) => {
        const row = document.querySelector(selector).querySelector('.attn-explorer-row');
        return {query: Number(row.dataset.query), causal: row.dataset.causal === '1',
                scaled: row.dataset.scaled === '1',
                weights: [...row.querySelectorAll('.attn-explorer-weight')]
                    .map(s => Number(s.textContent))};
    }""", selector)


@pytest.mark.parametrize("edition", EDITIONS)
def test_explorer_works_on_the_site_without_a_kernel(browser, server, capsys, edition):
    page_name = next(n for n in site._lesson_names(edition) if n.startswith("09_"))
    visit = Visit(browser, f"{server}/{PREFIX[edition]}{site.LESSONS}/{page_name}.html")
    try:
        page = visit.page
        page.wait_for_selector(".attn-explorer .attn-explorer-row", timeout=10_000)
        example = pronoun_example_of(edition)
        tokens = page.locator(".attn-explorer").first.locator(".attn-explorer-token")
        assert [t.strip() for t in tokens.all_inner_texts()] == list(example.tokens)
        row = shown_row(page)
        assert row["query"] == example.default_query
        assert row["weights"] == pytest.approx(explorer_state(example).weights, abs=6e-4)
        root = page.locator(".attn-explorer").first
        root.locator(".attn-explorer-token").nth(1).click()
        assert shown_row(page)["weights"] == pytest.approx(
            explorer_state(example, 1).weights, abs=6e-4)
        root.locator(".attn-explorer-causal").click()
        root.locator(".attn-explorer-scale").click()
        assert shown_row(page)["weights"] == pytest.approx(
            explorer_state(example, 1, causal=True, scaled=False).weights, abs=6e-4)
        n = len(example.tokens)
        latencies = [page.evaluate(CLICK_LATENCY_JS, [(2 + step) % n, ".attn-explorer"])
                     for step in range(LATENCY_CLICKS)]
        median = statistics.median(latencies)
        with capsys.disabled():
            print(f"\nexplorer on the static site ({edition}): click-to-update latency median "
                  f"{median:.1f} ms over {len(latencies)} clicks (max {max(latencies):.1f}; "
                  f"target <= {LATENCY_TARGET_MS} ms)")
        assert not visit.errors, visit.errors
        assert not visit.outside_requests(), visit.outside_requests()
        assert median <= LATENCY_TARGET_MS, f"median click-to-update latency {median:.1f} ms"
    finally:
        visit.close()


# --- the live view (course_utils.views.live_view) on the static site -----------------------------

def _live_view_pages() -> list:
    """(edition, page name) of every lesson whose stored outputs hold a live view."""
    found = []
    for edition in EDITIONS:
        for name, path in zip(site._lesson_names(edition), lesson_paths(edition), strict=True):
            if "data-live-model" in path.read_text(encoding="utf-8"):
                found.append((edition, name))
    return found


@pytest.mark.parametrize(("edition", "page_name"), _live_view_pages() or [pytest.param(
    None, None, marks=pytest.mark.skip(reason="no lesson shows a live view yet"))])
def test_live_view_works_on_the_site_without_a_kernel(browser, server, capsys, edition,
                                                      page_name):
    """Typing updates the view, rows sum to 1, no weight on a future key, the keystroke
    latency on a 64-character text, nothing fetched from another host (the page's model is
    checked against Python's in tests/test_live.py and tests/test_live_browser.py)."""

    visit = Visit(browser, f"{server}/{PREFIX[edition]}{site.LESSONS}/{page_name}.html")
    try:
        page = visit.page
        page.wait_for_selector("[data-live-model][data-text]", timeout=10_000)
        roots = page.evaluate("() => [...document.querySelectorAll('[data-live-model]')]"
                              ".map(e => '#' + e.id)")
        for root in roots:
            latencies = check_live_view(page, root)
            median = statistics.median(latencies)
            with capsys.disabled():
                print(f"\nlive view on the static site ({page_name}, {edition}): keystroke-to-"
                      f"update latency median {median:.1f} ms over {len(latencies)} keystrokes "
                      f"on a 64-character text (max {max(latencies):.1f}; target <= "
                      f"{LATENCY_TARGET_MS} ms)")
            assert median <= LATENCY_TARGET_MS, f"median keystroke latency {median:.1f} ms"
        assert not visit.errors, visit.errors
        assert not visit.outside_requests(), visit.outside_requests()
    finally:
        visit.close()


def _translator_pages() -> list:
    """(edition, page name) of every lesson whose stored outputs hold lesson 15's translator."""
    return [(edition, name) for edition in EDITIONS
            for name, path in zip(site._lesson_names(edition), lesson_paths(edition), strict=True)
            if "data-live-translator" in path.read_text(encoding="utf-8")]


@pytest.mark.parametrize(("edition", "page_name"), _translator_pages() or [pytest.param(
    None, None, marks=pytest.mark.skip(reason="no lesson shows the translator yet"))])
def test_the_translator_works_on_the_site_without_a_kernel(browser, server, edition, page_name):
    """The page translates a number it has never shown, each written character's
    cross-attention rows sum to 1 over the words read, and nothing comes from another host
    (the page's numbers are checked against Python's in tests/test_translator_browser.py)."""
    visit = Visit(browser, f"{server}/{PREFIX[edition]}{site.LESSONS}/{page_name}.html")
    try:
        visit.page.wait_for_selector("[data-live-translator][data-output]", timeout=10_000)
        ran = visit.page.evaluate("""() => {
            const root = document.querySelector('[data-live-translator]');
            const r = window.courseLiveModel(root).run('three thousand and five');
            return {tokens: r.tokens, output: r.output, cross: r.crossAttentions};
        }""")
        assert ran["tokens"] and ran["output"], ran
        for heads in ran["cross"]:
            for rows in heads:
                assert len(rows) == len(ran["output"])
                for row in rows:
                    assert len(row) == len(ran["tokens"]) and abs(sum(row) - 1) < 1e-9
        assert not visit.errors, visit.errors
        assert not visit.outside_requests(), visit.outside_requests()
    finally:
        visit.close()


# The weights travel with the page, so the page itself is what a learner downloads.
LIVE_PAGE_LIMIT_BYTES = 1_500_000


@pytest.mark.parametrize(("edition", "page_name"), _live_view_pages() or [pytest.param(
    None, None, marks=pytest.mark.skip(reason="no lesson shows a live view yet"))])
def test_a_lesson_page_with_a_live_view_stays_within_its_weight(site_dir, edition, page_name):
    page = site_dir / PREFIX[edition] / site.LESSONS / f"{page_name}.html"
    size = page.stat().st_size
    print(f"{page.relative_to(site_dir)}: {size / 1e6:.2f} MB")
    assert size <= LIVE_PAGE_LIMIT_BYTES, (
        f"{page.name} ({edition}) weighs {size / 1e6:.2f} MB, over the "
        f"{LIVE_PAGE_LIMIT_BYTES / 1e6:.1f} MB a page with a live view may weigh")
