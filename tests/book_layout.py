"""How a built book's pages lie in a browser (issue 105): screens tall, tables clipped, scrolling or cut inside a
name, charts past the column, and where the front page's answer ends on the first screen. One measurement for
the tiny book the suite builds and for any built book named by `TWOTOWER_BUILT_BOOK` (the cpu book of a run)."""

from __future__ import annotations

from pathlib import Path

PAGES = ("book/intro", "book/scorecard", "book/rerun", "book/paper_scale", "book/paper_and_code",
         "notebooks/00_data", "notebooks/01_training", "notebooks/02_probing", "notebooks/03_correlations",
         "notebooks/04_pos", "notebooks/05_ica", "notebooks/06_frequency", "notebooks/07_emergence",
         "notebooks/08_probe_validation", "book/ladder", "book/model", "book/changelog", "book/changelog_december",
         "book/changelog_november", "book/changelog_november_early", "book/changelog_probe_studies",
         "book/changelog_earlier", "book/changelog_earliest", "book/probe_validation", "book/decisions",
         "book/execution")
FRONT_SCREENS, SCORECARD_SCREENS, PAGE_SCREENS = 4.0, 10.0, 12.0   # issue 105's budgets, screens of 1,280 x 800
CLAIM_CHAPTER_SCREENS = 7.0   # a chapter: "about six screens" (#71, #105)

# a key or name in a table cell is never cut inside itself to narrow a column (issue 105: `data.corp|us`)
CUT_NAMES = r"""[...document.querySelectorAll('main table td code')].filter(c => {
  const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT); let top = null, before = '', cut = false, node;
  while ((node = walk.nextNode())) for (let i = 0; i < node.length; i++) {
    const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
    const box = range.getBoundingClientRect(); if (!box.width) continue;
    if (top !== null && box.top > top + 2 && !/[._=:\/,+@-]/.test(before)) cut = true;
    top = box.top; before = node.data[i]; }
  return cut; }).map(c => c.innerText)"""
CLIPPED = ("[...document.querySelectorAll('main table')].filter(t => t.getBoundingClientRect().right > "
           "document.documentElement.clientWidth + 1).map(t => t.innerText.slice(0, 60))")
WIDE_CHARTS = ("[...document.querySelectorAll('.tt-chart svg, .tt-chart canvas')].map(s => Math.round(s.getBoundingClientRect()"
               ".right - (s.closest('.bd-article-container') || document.querySelector('main')).getBoundingClientRect()"
               ".right)).filter(px => px > 1)")
# a table wider than the nearest box that clips or scrolls it (itself too)
SCROLLING = """[...document.querySelectorAll('main table')].filter(t => {
    if (t.scrollWidth - t.clientWidth > 1) return true;
    let box = t.parentElement;
    while (box && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
    return box && t.getBoundingClientRect().right - box.getBoundingClientRect().right > 1;
  }).map(t => t.innerText.slice(0, 60))"""
# where the first screen's answer ends: the headline table and the tally and size sentence under it (px from the top)
ANSWER_ENDS = ("[document.querySelector('main .full-width table'), [...document.querySelectorAll('main p')]"
               ".find(p => p.innerText.startsWith('Tally'))].map(e => e ? Math.round(e.getBoundingClientRect()"
               ".bottom + window.scrollY) : null)")


def measure_pages(browser, port: int, html: Path) -> dict:
    """Every page of `PAGES` the book at `html` has, at 1,280 x 800: its height in screens, the tables clipped,
    cut inside a name or scrolling (folded parts opened), the charts past the column, and the front page's
    table overflow and first-screen answer (at 1,280 x 800 and 1,400 x 900)."""
    found = {k: {} for k in ("screens", "broken", "clipped", "wide_charts", "scrolling")}
    found["front_overflow"] = found["first_screen"] = None
    for page in (p for p in PAGES if (html / f"{p}.html").exists()):
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/{page}.html"}, session=True)
        browser.poll("document.readyState", done=lambda v: v == "complete")
        browser.drain(0.5)
        found["screens"][page] = browser.evaluate("document.documentElement.scrollHeight / 800")
        found["broken"][page] = browser.evaluate(CUT_NAMES)
        found["clipped"][page] = browser.evaluate(CLIPPED)
        browser.poll("(c => c.length === [...c].filter(e => e.dataset.rendered === 'true').length)"
                     "(document.querySelectorAll('.tt-chart'))", tries=50)
        found["wide_charts"][page] = browser.evaluate(WIDE_CHARTS)
        if page == "book/intro":   # the answer's table is read whole: it spans the page's margin, no scrolling
            found["front_overflow"] = browser.evaluate("(t => t ? t.scrollWidth - t.clientWidth : null)"
                                                       "(document.querySelector('main .full-width table'))")
            first = {800: browser.evaluate(ANSWER_ENDS)}
            browser.call("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 900, "deviceScaleFactor": 1,
                                                                "mobile": False}, session=True)
            browser.drain(0.5)
            first[900] = browser.evaluate(ANSWER_ENDS)
            browser.call("Emulation.clearDeviceMetricsOverride", {}, session=True)
            browser.drain(0.5)
            found["first_screen"] = first
        browser.evaluate("document.querySelectorAll('main details').forEach(d => d.open = true)")
        browser.drain(0.3)
        found["scrolling"][page] = browser.evaluate(SCROLLING)
    return found


def layout_failures(found: dict) -> list[str]:
    """What `measure_pages` found against issue 105's rules; empty when the book keeps them all."""
    screens = found["screens"]
    failures = [f"{what}: {found[key]}" for key, what in (
        ("clipped", "tables clipped at 1,280 px"), ("broken", "names cut inside themselves in a table"),
        ("scrolling", "tables that scroll sideways"), ("wide_charts", "charts past the article's column (px)"))
        if any(found[key].values())]
    if "book/intro" in screens:
        if found["front_overflow"] is None or found["front_overflow"] > 1:
            failures.append(f"front table scrolls {found['front_overflow']} px")
        # the first screen holds the answer before any scroll: the headline table, the tally and the size sentence
        if not all(None not in ends and max(ends) <= height for height, ends in found["first_screen"].items()):
            failures.append(f"the answer is not on the first screen: {found['first_screen']}")
    # a chapter a reader can finish, its method and extra tables folded (the appendix notebook of the probe's
    # validation is a page); the front page and the scorecard shorter, no page over PAGE_SCREENS
    long = {p: round(v, 1) for p, v in screens.items() if p.startswith("notebooks/")
            and p != "notebooks/08_probe_validation" and v > CLAIM_CHAPTER_SCREENS}
    if long:
        failures.append(f"chapters longer than {CLAIM_CHAPTER_SCREENS} screens of 1,280 x 800: {long}")
    budgets = {"book/intro": FRONT_SCREENS, "book/scorecard": SCORECARD_SCREENS}
    over = {p: round(v, 1) for p, v in screens.items() if v > budgets.get(p, PAGE_SCREENS)}
    if over:
        failures.append(f"pages over their budget of screens of 1,280 x 800: {over}")
    return failures
