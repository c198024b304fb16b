"""The book: offline charts, generated pages, and the end-to-end build.

The end-to-end test executes every section notebook that exists at the tiny profile through
papermill (on the generated test corpus, so no network is needed), builds the book with
warnings as errors, and opens a chapter in headless Chromium with every outside host
unreachable to check that a chart really rendered and no script failed.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from studies.emergence import charts as emergence_charts
from tests.book_layout import layout_failures, measure_pages
from tests.browser import Browser, free_port, page_problems, wait_for_port
from tests.conftest import skip_or_fail_in_ci
import yaml

from twotower_lib.book import build, charts, pipeline, publish, render
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name
from twotower_lib import paper

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------- charts


def _scores() -> pd.DataFrame:
    tokens = [f"tok{i}" for i in range(40)]
    rows = [{"token": t, "frequency": 1000 - 20 * i, "case": case, "group": ["VERB", "NOUN"][i % 2],
             "score": ((i * 7) % 11 - 5) / 3 + (0.1 if case == "b" else 0.0)}
            for i, t in enumerate(tokens) for case in ("a", "b")]
    return pd.DataFrame(rows)


def test_every_builder_renders_offline_with_tooltips():
    s = _scores()
    matrix = pd.DataFrame([[1.0, 0.5], [0.5, 1.0]], index=["a", "b"], columns=["a", "b"])
    curve = pd.DataFrame({"tokens": [1e5, 1e6, 1e5, 1e6], "r": [0.1, 0.6, 0.0, 0.3], "lo": [0.0, 0.5, -0.1, 0.2],
                          "hi": [0.2, 0.7, 0.1, 0.4], "config": ["gpt", "gpt", "bert", "bert"]})
    built = [
        charts.frequency_chart(s[s.case == "a"][["token", "frequency"]]),
        charts.score_lines(s, reference="b"),
        charts.correlation_heatmap(matrix),
        charts.score_distributions(s, ["VERB", "NOUN"]),
        charts.score_vs_rank(s),
        emergence_charts.curve_with_band(curve, "tokens", "r", "lo", "hi", "config", "r vs tokens", "tokens seen", "r", log_x=True),
        emergence_charts.gap_scatter(pd.DataFrame({"config": ["gpt", "bert"], "pair": ["s1-s2"] * 2, "tokens": [1e6, 4e6],
                                         "model_type": ["gpt", "bert"], "r": [0.5, -0.4], "abs_r": [0.5, 0.4],
                                         "smaller_gap": [0.06, 0.02]})),
        charts.training_curves(pd.DataFrame({"case": ["a"] * 3, "tokens": [10, 20, 30], "loss": [5.0, 4.0, 3.5],
                                             "val_loss": [None, None, 3.7]})),
        charts.tower_scatter(s[s.case == "a"].assign(train_count=s["frequency"], count=s["frequency"] // 10,
                                                     p1_mean=0.01, p2_mean=lambda d: 0.01 * 2.0 ** -d["score"])),
        charts.component_heatmap(pd.DataFrame({"word_index": [0, 0, 1, 1], "token": ["tok0", "tok0", "tok1", "tok1"],
                                               "component": [0, 1, 0, 1], "value": [0.1, 3.2, -2.7, 0.4]})),
        charts.group_histogram(pd.DataFrame({"n_groups": [0, 1, 2], "n_words": [13, 45, 42], "share": [0.13, 0.45, 0.42]})),
        charts.group_word_lists(s[s.case == "a"].head(6).assign(group=["#1 (s = +0.20)"] * 3 + ["#4 (s = -0.50)"] * 3,
                                                               typicality=[1, 2, 3] * 2, count=s["frequency"],
                                                               value=3.0)),
    ]
    for chart in built:
        spec = chart.to_dict()
        bundle = render.mimebundle(spec)
        png = base64.b64decode(bundle["image/png"])
        assert png.startswith(b"\x89PNG") and len(png) > 2000
        html = bundle["text/html"]
        assert f'import(new URL("vega/{render.BUNDLE_NAME}"' in html and "http" not in html.split("<script")[0]
        assert html.count("</script>") == 1  # the spec cannot close the script early
        assert "tooltip" in json.dumps(spec)
        assert 'renderer: "svg"' in html                                  # a few marks: SVG
    assert "token" in json.dumps(built[1].to_dict()["encoding"]["tooltip"])
    heatmap = built[9].to_dict()  # one row per word, the values flattened in the browser
    assert heatmap["transform"] == [{"flatten": ["component", "value"]}]
    assert heatmap["datasets"][heatmap["data"]["name"]][1] == {"word_index": 1, "token": "tok1", "component": [0, 1],
                                                                "value": [-2.7, 0.4]}
    with pytest.raises(ValueError, match="reference case 'c'"):
        charts.score_lines(s, reference="c")


def test_a_chart_of_thousands_of_marks_draws_on_a_canvas():
    """One SVG element a mark kept a chapter's page from answering for a minute: past `render.MAX_SVG_MARKS` marks
    (a heatmap's counted per flattened cell) a chart draws on a canvas."""
    words = render.MAX_SVG_MARKS // 8 + 1      # few rows, each holding 16 cells
    heatmap = charts.component_heatmap(pd.DataFrame({"word_index": np.repeat(np.arange(words), 16), "token": "t",
                                                     "component": np.tile(np.arange(16), words), "value": 0.5})).to_dict()
    assert render.marks(heatmap) == words * 16 and render.renderer(heatmap) == "canvas"
    n = render.MAX_SVG_MARKS
    scatter = charts.score_vs_rank(pd.DataFrame({"token": [f"t{i}" for i in range(n)], "frequency": range(n, 0, -1),
                                                 "case": "a", "score": 0.0}))
    assert render.renderer(scatter.to_dict()) == "svg"                  # at the limit: still SVG
    more = charts.score_vs_rank(pd.DataFrame({"token": [f"t{i}" for i in range(n + 1)], "frequency": range(n + 1, 0, -1),
                                              "case": "a", "score": 0.0}))
    assert 'renderer: "canvas"' in render.mimebundle(more.to_dict())["text/html"]


def test_the_vega_bundle_is_local_and_complete(tmp_path):
    path = render.write_bundle(tmp_path)
    text = path.read_text()
    assert path.suffix == ".mjs" and "window.vegaEmbed" in text and len(text) > 500_000
    assert not re.search(r"""import\s*\(?\s*["']https?://""", text)  # fetches nothing at load


# ---------------------------------------------------------------------- generated pages


# The names in a table cell's code that a line break cuts inside a word: a break counts only after one of . _ = : / , -
# (where `tables.breakable` and the profile table put <wbr>), never between two letters of a word (issue 105).
def test_toc_lists_exactly_the_sections_that_exist():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    chapters = [f.split("/", 1)[1] for f in files if f.startswith("notebooks/")]
    assert chapters == [s.name for s in pipeline.make_pipeline("tiny").sections]
    for f in [toc["root"], *files]:
        if not f.startswith("notebooks/"):
            assert (ROOT / f"{f}.md").exists(), f


def test_placeholders_are_filled_from_code_and_artifacts():
    card = {"profile": "tiny", "counts": {"reproduced": 0, "partly": 0, "not": 0, "not attempted": 1},
            "rows": [{"id": "table2", "item": "Table 2", "paper": "r = 0.94", "ours": "", "verdict": "not attempted",
                      "note": "n|a"}]}
    text = "\n".join(["<!-- PROFILES: x -->", "<!-- SCORECARD: y -->", "<!-- API: z -->", "<!-- PICTURE: p -->"])
    out = build.fill_placeholders(text, card)
    assert "<!--" not in out
    assert all(f"**{name}**" in out for name in ("tiny", "cpu", "cpu-long", "gpu", "paper"))
    from twotower_lib.book.tables import keyed

    verdict = keyed("verdict@tiny: table2", "not attempted", "**not attempted**")
    assert f"| Table 2 | r = 0.94 | — | {verdict} | n\\|a |" in out
    assert ".. automodule:: twotower_lib.book.pipeline" in out and "__main__" not in out
    for page in ("rerun.md", "scorecard.md", "api.md", "paper_and_code.md", "paper_scale.md"):
        assert build._PLACEHOLDER.search((ROOT / "book" / page).read_text()), page
    # the profile table's keys break after "." or "_" only, never inside a word
    keys = re.findall(r'<code style="word-break:normal;overflow-wrap:normal">(.*?)</code>', build.profiles_markdown())
    assert "data.<wbr>corpus" in keys and all(re.fullmatch(r"(?:[a-z0-9]+[._]<wbr>)*[a-z0-9]+", k) for k in keys), keys


def test_the_scorecard_picture_is_an_offline_chart_of_the_points():
    card = {"profile": "tiny", "points": [
        {"item": "table2.same-config", "pair": "bert-large-s1 vs bert-large-s2", "paper": 0.94, "ours": 0.31,
         "ci_low": 0.2, "ci_high": 0.4},
        {"item": "table4", "pair": "gpt-s1 vs frequency rank", "paper": 0.22, "ours": -0.1, "ci_low": None,
         "ci_high": None}]}
    block = build.picture_markdown(card)
    assert block.startswith("```{raw} html\n") and block.rstrip().endswith("```")
    assert "tt-chart" in block and "data:image/png;base64" in block and "bert-large-s1 vs bert-large-s2" in block
    assert "\n\n" not in block.split("\n", 1)[1]  # no blank line inside the raw block
    assert "No correlation" in build.picture_markdown({"profile": "tiny", "points": []})


def test_a_chapter_shows_no_local_path_and_collapses_the_injected_parameters(tmp_path):
    runs = build.PROJECT_ROOT / "runs"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f'profile = "tiny"\nruns_dir = "{runs}"', metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("profile = None  # the parameters a reader may pass", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("x", outputs=[
            nbformat.v4.new_output("stream", name="stderr", text=f"{sys.prefix}/lib/x.py:1: Warning\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": f"{runs}/tiny/probing",
                                                           "text/html": f"<td>{build.PROJECT_ROOT}/notebooks</td>",
                                                           "image/png": "iVBORw0KGgo="})])])
    path = tmp_path / "s.ipynb"
    nbformat.write(nb, path)
    out = build.for_readers(path, runs)
    assert str(build.PROJECT_ROOT) not in out and sys.prefix not in out
    cells = nbformat.reads(out, as_version=4).cells
    assert cells[0].source == 'profile = "tiny"\nruns_dir = "runs"' and "hide-cell" in cells[0].metadata.tags
    assert cells[1].metadata.tags == ["parameters", "hide-input"]      # folded: the parameter table lists them
    # each folded under a label that says what it holds, not "Show code cell content"
    assert [c.metadata.mystnb.code_prompt_show for c in cells[:2]] == ["The parameters this build ran with",
                                                                       "The parameters a re-run may set"]
    assert cells[2].outputs[0]["text"] == "<python>/lib/x.py:1: Warning\n"
    assert cells[2].outputs[1]["data"]["text/plain"] == "runs/tiny/probing"
    assert cells[2].outputs[1]["data"]["text/html"] == "<td>./notebooks</td>"
    assert cells[2].outputs[1]["data"]["image/png"] == "iVBORw0KGgo="
    elsewhere = build.for_readers(path, tmp_path / "elsewhere")  # runs outside the checkout: named by the variable
    assert "$TWOTOWER_RUNS" not in elsewhere and "./runs/tiny/probing" in elsewhere
    assert "$TWOTOWER_RUNS" in dict(build.local_paths(tmp_path)).values()
    assert dict(build.local_paths(runs, str(tmp_path / "c" / "corpus.txt")))[str(tmp_path / "c")] == "<corpus folder>"
    assert "<corpus folder>" not in dict(build.local_paths(runs, "registry:brown")).values()


def test_every_folded_cell_of_a_chapter_says_what_it_holds():
    """A folded cell opens under a label naming what it holds (`mystnb.code_prompt_show`), so that a row of folded
    tables reads as a list of them, not as a screen of "Show code cell content" buttons (issue 105)."""
    import jupytext

    unlabelled = []
    for path in sorted((build.PROJECT_ROOT / "notebooks").glob("*.py")):
        for i, cell in enumerate(jupytext.read(path).cells):
            tags = set(cell.metadata.get("tags", []))   # folded whole: no source shows what the button opens
            folded = "hide-cell" in tags or ("hide-output" in tags and tags & {"hide-input", "remove-input"})
            if cell.cell_type == "code" and folded and not cell.metadata.get("mystnb", {}).get("code_prompt_show"):
                unlabelled.append(f"{path.name} cell {i}: {cell.source.splitlines()[0][:60]}")
    assert not unlabelled, unlabelled


def test_docstrings_are_made_safe_for_the_strict_build():
    lines = ["Uses `x` and ``y``.", "", "Second paragraph."]
    build._docstring_as_rst(None, "function", "f", None, {}, lines)
    assert lines[0] == "Uses ``x`` and ``y``."
    broken = ["Members: words with |y_j| > 2.5.", "  indented without reason", "back"]
    build._docstring_as_rst(None, "function", "f", None, {}, broken)
    assert broken[:2] == ["::", ""] and broken[2] == "    Members: words with |y_j| > 2.5."


def test_a_notebook_with_an_error_never_becomes_a_chapter(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1/0", outputs=[nbformat.v4.new_output(
        "error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])])])
    nbformat.write(nb, tmp_path / "x.ipynb")
    with pytest.raises(UserError, match="contains an error .*ZeroDivisionError"):
        build.check_executed(tmp_path / "x.ipynb", "00_data")


def test_book_refuses_sections_that_were_not_run(tmp_path):
    pipe = pipeline.make_pipeline("tiny", runs_dir=tmp_path / "runs")
    with pytest.raises(UserError, match=r"section 00_data has not been run at profile 'tiny'.*python -m twotower_lib run --profile tiny"):
        build.assemble(pipe, tmp_path / "stage")


# ---------------------------------------------------------------------- end to end


def book_disagreements(page: str) -> list[str]:
    """What a built page shows that disagrees with itself: an estimate printed beside an interval that does not
    hold it (unless the bias-corrected estimate it belongs to is printed), a table row with another number of
    cells than its header, a Markdown table left unrendered."""
    text = re.sub(r"<[^>]+>", " ", page).replace("−", "-")
    bad = [m.group(0) for m in re.finditer(r"(?<![\w.+-])([+-]?\d+\.\d+)\s*\[([+-]?\d+\.\d+), ([+-]?\d+\.\d+)\]", text)
           if not float(m.group(2)) <= float(m.group(1)) <= float(m.group(3))
           and "bias-corrected" not in text[max(0, m.start() - 20):m.end()]]
    for table in re.findall(r"<table.*?</table>", page, re.S):
        head = len(re.findall(r"<th[ >]", re.search(r"<thead.*?</thead>", table, re.S).group(0))) if "<thead" in table else 0
        rows = [len(re.findall(r"<t[hd][ >]", r)) for r in re.findall(r"<tr.*?</tr>", re.search(r"<tbody.*?</tbody>", table, re.S).group(0), re.S)] if "<tbody" in table else []
        bad += [f"a row of {n} cells under {head} headers" for n in rows if head and n != head]
    bad += re.findall(r"<p>\|[^<]*\|---", page)
    return bad


def key_disagreements(pages: dict[str, str]) -> list[str]:
    """Across the built pages: every quantity marked with a key (`tables.keyed`) shows one value wherever it
    appears, and each span shows the value it names."""
    seen: dict[str, dict[str, list[str]]] = {}
    bad = []
    for name, page in pages.items():
        for key, value, inner in re.findall(r'<span class="tt-key" data-key="([^"]*)" data-value="([^"]*)">(.*?)</span>',
                                            page, re.S):
            seen.setdefault(html.unescape(key), {}).setdefault(html.unescape(value), []).append(name)
            if html.unescape(value) not in html.unescape(re.sub(r"<[^>]+>", "", inner)):
                bad.append(f"{name}: {key} names {value} but shows {inner}")
    bad += [f"{key}: " + "; ".join(f"{v} on {', '.join(sorted(set(p)))}" for v, p in values.items())
            for key, values in seen.items() if len(values) > 1]
    return bad


def test_the_book_self_check_catches_what_it_should():
    assert book_disagreements("<p>r = 0.67 [0.69, 0.79]</p>") and not book_disagreements("<p>r = 0.70 [0.69, 0.79]</p>")
    assert not book_disagreements("<p>0.67 (bias-corrected 0.74 [0.69, 0.79])</p>")
    table = "<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td></tr></tbody></table>"
    assert book_disagreements(table) == ["a row of 1 cells under 2 headers"]
    assert book_disagreements("<p>| a | b |\n|---|---|</p>")
    from twotower_lib.book.tables import keyed

    same = {"a": keyed("verdict@cpu: fig4", "partly", "<strong>partly</strong>"), "b": keyed("verdict@cpu: fig4", "partly")}
    assert not key_disagreements(same)
    assert key_disagreements(same | {"c": keyed("verdict@cpu: fig4", "not")}) == ["verdict@cpu: fig4: partly on a, b; not on c"]
    assert not key_disagreements(same | {"c": keyed("verdict@gpu: fig4", "not")})     # another profile's verdict
    assert key_disagreements({"a": keyed("r", "0.35", "0.28")}) == ["a: r names 0.35 but shows 0.28"]


@pytest.mark.slow
def test_end_to_end_tiny_pipeline_and_strict_book_build(built_book):
    pipe, html = built_book["pipe"], built_book["html"]
    assert built_book["ran"] == [s.name for s in pipe.sections] and built_book["rerun"] == []
    assert built_book["warm"] < 60
    for s in pipe.sections:
        page = (html / "notebooks" / f"{s.name}.html").read_text()
        assert "tt-chart" in page and "data:image/png;base64" in page, f"{s.name} has no chart"
    assert (html / "_static" / "vega" / render.BUNDLE_NAME).exists()
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    local = [str(ROOT), sys.prefix, str(pipe.root.parent), str(Path(pipe.profile.data.corpus).parent)]
    for page in html.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r"""<script[^>]+src=["']https?://""", text), f"{page} loads a script from the network"
        assert not [p for p in local if p in text], f"{page} shows a local path"
        assert text.count("const THEBE_JS_URL") <= 1, page
    decisions_page = (html / "book" / "decisions.html").read_text()
    assert "{{" not in decisions_page and "−0." in decisions_page  # its numbers were filled in from results/
    scorecard_page = (html / "book" / "scorecard.html").read_text()
    card = json.loads((pipe.root / "scorecard.json").read_text())
    assert card["profile"] == "tiny" and len(card["rows"]) > 10
    for row in card["rows"]:
        assert row["verdict"] in scorecard_page
    measured = {r["id"]: r for r in card["rows"]}
    for item in ("fig4", "fig5", "fig6", "fig7", "table3", "controls"):  # the sections recorded their items
        assert measured[item]["ours"] and "not written" not in measured[item]["note"], measured[item]
    # all four controls ran at the tiny profile: four single-tower runs, probed and paired; run 1 also
    # against its own half-way snapshot, and the r a shared quality profile alone would give
    assert all(f"{c} |r| = " in measured["controls"]["ours"] for c in ("untrained", "independent", "permutation",
                                                                      "quality gap"))
    quality = json.loads((pipe.root / "correlations" / "section.json").read_text())["summary"]["quality"]
    assert sorted(q["a"] for q in quality) == sorted(case_name(m, s) for m, s in pipe.profile.case_list()) and all(
        -1 <= q["r"] <= 1 for q in quality)
    training = pipe.root / "training"
    assert sorted(p.name for p in training.glob("*-k1-s*")) == [f"gpt-k1-s{i}" for i in (1, 2, 3, 4)]
    assert all((pipe.root / "probing" / "independent" / f"gpt-pair-{i}" / "manifest.json").exists() for i in (1, 2))
    assert "automodule" not in (html / "book" / "api.html").read_text()
    assert "twotower_lib.book.sections.open_section" in (html / "book" / "api.html").read_text()
    assert 'class="math' in (html / "book" / "model.html").read_text()
    for page in html.rglob("*.html"):                    # the book agrees with itself, page by page
        assert not book_disagreements(page.read_text()), (page, book_disagreements(page.read_text())[:5])
        assert "|---|" not in page.read_text(), f"{page} shows a Markdown table as text"
    pages = {p.relative_to(html).as_posix(): p.read_text() for p in html.rglob("*.html")}
    assert sum(p.count('class="tt-key"') for p in pages.values()) >= 2 * len(card["rows"])  # front and scorecard
    assert not key_disagreements(pages), key_disagreements(pages)[:5]    # and across pages
    execution = (html / "book" / "execution.html").read_text()   # each chapter's last run, generated at build
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", execution, re.S)
    assert all(any(s.name in r and "up to date" in r for r in rows) for s in pipe.sections), execution[-3000:]
    made = publish.training_runs(pipe)         # and what the runs they read took when they were made
    assert len(made) >= 4 and f"read {len(made)} training runs, which took {publish.run_minutes({'t': made}, 't'):,.1f} run-minutes" in execution
    for claim in ("04_pos", "05_ica", "06_frequency"):   # each claim chapter: its result box is a table, not pipes
        page = (html / "notebooks" / f"{claim}.html").read_text()
        assert re.search(r"<th[^>]*>\s*(<p>)?paper item", page) and "| paper item |" not in page, claim
        assert "Caveats" in page and "Re-run with new parameters" in page, claim


@pytest.mark.slow
def test_single_source_pairs_are_collected_from_a_pipeline_run(built_book, tmp_path):
    from studies.register import runner as register
    from studies.register import report as single_source

    pipe = built_book["pipe"]
    rows = register.collect(pipe.root, "tiny corpus")
    assert [r["pair"] for r in rows] == ["gpt-s1 vs gpt-s2"]  # the tiny profile's one same-configuration pair
    assert rows[0]["shuffled labels"] is not None and 0 < rows[0]["probe reliability"] <= 1 and rows[0]["probe version"] >= 5
    assert rows[0]["probe precondition"] == "whiten"  # the default since version 7's whitened features
    assert rows[0]["probe precision"] == "fp32" and rows[0]["probe code"]   # `auto` on a CPU; the code that probed
    reliability = json.loads((pipe.root / "probing" / "section.json").read_text())["summary"]["reliability"]
    assert (rows[0]["probe reliability"] is None) == (not {"gpt-s1", "gpt-s2"} <= set(reliability))  # both runs' own
    out = tmp_path / "single.json"
    register.main(["--profile", "tiny", "--run", f"tiny corpus={pipe.root.parent}", "--out", str(out)])
    assert list(single_source.load(out)["corpus"]) == ["tiny corpus"] * len(rows)
    with pytest.raises(UserError, match="has no finished 03_correlations run"):
        register.collect(tmp_path / "nothing", "x")
    committed = single_source.load()  # the committed test: every corpus measured with one probe version
    assert committed["probe version"].nunique() == 1 and committed["probe precondition"].nunique() == 1
    assert list(committed["probe precision"].unique()) == ["fp32"]   # as every CPU probes today
    assert {"mixed", "books", "wiki"} <= set(committed["corpus"])


def test_the_single_source_finding_is_said_from_the_pairs():
    import pandas as pd

    from studies.register import report as single_source

    def row(corpus, model, r, low, high=None, shuffled=0.06, margin=0.01):
        return {"profile": "cpu", "corpus": corpus, "pair": f"{model}-s1 vs {model}-s2", "r": r, "ci_low": low,
                "ci_high": r + 0.05 if high is None else high, "shuffled labels": shuffled, "order margin": margin}

    table = pd.DataFrame([row("books", "gpt", 0.44, 0.40), row("wiki", "gpt", 0.03, -0.05), row("mixed", "gpt", 0.39, 0.37),
                          row("books", "bert-large", -0.18, -0.28, -0.10, margin=0.002), row("wiki", "bert-large", 0.0, -0.05),
                          row("mixed", "bert-large", 0.81, 0.80)])
    found = single_source.holds_alone(table)
    assert found["gpt"]["alone"] == {"books": 0.44, "wiki": 0.03} and found["gpt"]["agrees"] == ["books"]  # wiki: within its control
    assert found["bert-large"]["agrees"] == [] and found["bert-large"]["swapped"] == ["books"]
    text = single_source.sentence(table)
    assert "the GPT pair (r: books +0.44, wiki +0.03; mixed corpus +0.39) agrees on books alone, does not agree on wiki" in text
    assert ("pair (r: books −0.18, wiki +0.00; mixed corpus +0.81) splits the tokens on books alone but with the towers' roles swapped "
            "(r < 0: Eq. 3 named the other tower primary in one run, by margins of at most 0.2% of the mean "
            "probability), does not agree on wiki, so no single source keeps its mixed-corpus agreement (|r| at most "
            "0.18 alone against 0.81 mixed)") in text
    assert "books −0.18" in text and "`cpu` profile" in text
    flip = table.assign(**{"order margin": 0.002})[table["pair"].str.startswith("bert")]
    assert ("pair (r: books −0.18, wiki +0.00; mixed corpus +0.81) has towers equally good on every corpus (Eq. 3's "
            "margin at most 0.2% of the mean probability, the mixed corpus included), so which tower is primary, and the "
            "sign of r, is a coin flip and only |r| says how consistently the tokens are split: books 0.18, wiki 0.00 "
            "against 0.81 on the mixed corpus") in single_source.sentence(flip)
    lost = table[(table["corpus"] == "wiki") | (table["corpus"] == "mixed")]
    assert "does not agree on wiki alone: at this scale its agreement needs the mixed corpus" in single_source.sentence(lost)
    everywhere = table[table["pair"].str.startswith("gpt") & (table["corpus"] != "wiki")]
    assert "still agrees on every single source" in single_source.sentence(everywhere)
    assert single_source.sentence(table.iloc[:0]).startswith("*")
    # each pair is read against its ceilings, and a probe below its reliability goal is named
    measured = table.assign(**{"text ceiling": [0.69, 0.55, 0.82, 0.36, 0.34, 0.89],
                               "probe reliability": [0.99, 0.99, 0.99, 0.96, 0.89, 0.99]})
    said = single_source.sentence(measured)
    assert "mixed corpus +0.39; text ceilings 0.55–0.69 alone, 0.82 mixed) agrees on books alone" in said
    assert said.endswith("0.18 alone against 0.81 mixed), and the probe-seed reliability falls below its 0.95 goal on wiki "
                         "(0.89), against 0.99 on the mixed corpus.")
    partial = measured.assign(**{"probe reliability": [0.99, 0.99, None, 0.96, 0.89, None]})
    assert single_source.sentence(partial).endswith("goal on wiki (0.89) (measured on books and wiki only).")
    low = measured.assign(**{"probe reliability": [0.90, 0.89, 0.88, 0.99, 0.99, 0.99]})
    assert "goal on books (0.90), wiki (0.89) and mixed (0.88); the Bert-large pair" in single_source.sentence(low)
    # pairs measured with another probe than the current one say so
    from twotower_lib.probe.config import PROBE_VERSION

    assert "not yet comparable" not in single_source.sentence(table.assign(**{"probe version": PROBE_VERSION,
                                                                              "probe precondition": "whiten"}))
    older = single_source.sentence(table.assign(**{"probe version": 5, "probe precondition": "none"}))
    assert "Measured with probe version 5 (unwhitened); the current probe is version" in older
    # the verdict reads the division: a pair whose towers Eq. 3 names the other way round gets the same verdict
    bert = table["pair"].str.startswith("bert")
    mirrored = table.copy()
    mirrored.loc[bert, ["r", "ci_low", "ci_high"]] = -table.loc[bert, ["r", "ci_high", "ci_low"]].to_numpy()
    assert single_source.verdict(mirrored)["verdict"] == single_source.verdict(table)["verdict"] == "partly"
    both = table[table["corpus"] == "books"]   # GPT agrees on books, Bert-large splits them swapped
    assert single_source.verdict(both)["verdict"] == "reproduced"
    # corpora probed in different dtypes say so; one dtype says nothing
    dtype = ["bf16" if c != "mixed" else "fp32" for c in table["corpus"]]
    assert ("The towers were probed in bf16 (books, wiki) and fp32 (mixed), so the corpora's pairs do not compare "
            "across those dtypes.") in single_source.sentence(table.assign(**{"probe precision": dtype}))
    assert "probed in" not in single_source.sentence(table.assign(**{"probe precision": "fp32"}))


def test_a_finished_run_is_published_and_shown(built_book, tmp_path):
    from twotower_lib.book import publish

    pipe = built_book["pipe"]
    path = publish.publish(pipe, tmp_path / "profiles")
    assert path == tmp_path / "profiles" / "tiny.json" and path.stat().st_size < 200_000
    published = publish.load_published(tmp_path / "profiles")
    pub = published["tiny"]
    assert pub["scorecard"]["counts"] == json.loads((pipe.root / "scorecard.json").read_text())["counts"]
    assert set(pub["sections"]) == {s.name for s in pipe.sections}
    assert pub["section_seconds"] == pytest.approx(sum(s["seconds"] for s in pub["sections"].values()), abs=0.2)
    assert pub["overrides"] == {k: pipe.overrides[k] for k in ("data.corpus", "data.valid_fraction")} and pub["provenance"]["packages"]
    assert {r["run"] for r in pub["training"]} >= {"gpt-s1", "gpt-s2", "gpt-k1-s1"}
    assert {r["probe"] for r in pub["probes"]} >= {"gpt-s1", "untrained/gpt-s2", "independent/gpt-k1-s4"}
    assert all(r["minutes"] >= 0 and r["epochs"] >= 1 for r in pub["probes"]) and publish.run_minutes(pub, "probes") > 0
    table = publish.same_config_table(published)
    assert list(table["pair"]) == ["gpt-s1 vs gpt-s2"] and table["verdict"].isin(paper.VERDICTS).all()
    assert table["highest control"].notna().all()  # its own model's controls ran at the tiny profile
    from twotower_lib.probe.config import CURRENT_PROBE

    assert (table["probe"] == CURRENT_PROBE).all() and (publish.overview(published)["probe"] == CURRENT_PROBE).all()
    assert publish.probe_name({}) == "earlier (not the current)"      # published before probes recorded themselves
    assert "### Profile `tiny`" in publish.markdown(published) and len(publish.overview(published)) == 1
    side = publish.overview_by_profile(published)                     # section 07's: a column per profile
    assert list(side.columns) == ["tiny"] and pub["scorecard"]["counts"]
    assert all(side.loc[f"claims: {verdict}", "tiny"] == n for verdict, n in pub["scorecard"]["counts"].items())
    assert publish.machine(pub["provenance"]) in publish.markdown(published)  # minutes beside the CPU that ran them
    assert publish.load_published(tmp_path / "profiles", exclude="tiny") == {}
    assert "Other profiles, published" in (built_book["html"] / "book" / "scorecard.html").read_text()


def test_a_published_record_names_its_cpu():
    from twotower_lib.book import publish

    assert publish.machine({"cpu": {"model": "AMD EPYC", "flags": ["avx2", "avx512f"]}}) == "AMD EPYC with avx2, avx512f"
    assert publish.machine({"created": "2026-11-26"}) == "CPU not recorded"  # records made before `cpu` was kept


def test_only_a_complete_up_to_date_run_is_published(tmp_path):
    from twotower_lib.book import publish

    with pytest.raises(UserError, match=r"not complete and up to date.*\n  00_data: never ran at this profile"):
        publish.publish(pipeline.make_pipeline("tiny", runs_dir=tmp_path / "runs"), tmp_path / "profiles")
    assert not (tmp_path / "profiles").exists()


def test_a_published_run_names_its_probe_and_is_flagged_when_it_is_not_the_current_one():
    from dataclasses import asdict

    from twotower_lib.book import publish
    from twotower_lib.probe.config import PROBE_VERSION, ProbeConfig

    current = {"probe": {"version": PROBE_VERSION, "config": asdict(ProbeConfig())}}
    assert "on whitened joint_ln features" in publish.probe_note(current) and "Not the current" not in publish.probe_note(current)
    unwhitened = {"probe": {"version": PROBE_VERSION, "config": asdict(ProbeConfig(precondition="none"))}}
    assert "Not the current probe" in publish.probe_note(unwhitened)
    assert "earlier probe" in publish.probe_note({})


def test_a_published_file_of_another_format_is_refused(tmp_path):
    from twotower_lib.book import publish

    (tmp_path / "cpu-long.json").write_text(json.dumps({"format": 0, "profile": "cpu-long"}))
    with pytest.raises(UserError, match=r"format 0.*publish --profile cpu-long"):
        publish.load_published(tmp_path)


# ---------------------------------------------------------------------- in a real browser


@pytest.mark.slow
def test_a_chapter_renders_its_chart_in_a_browser_with_no_network(built_book, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        skip_or_fail_in_ci("chromium is not installed (apt-get install -y chromium)")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                               "--directory", str(built_book["html"])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = None
    try:
        wait_for_port(port, 5)
        browser = Browser(chromium)
        chapter = built_book["pipe"].sections[0].name
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/notebooks/{chapter}.html"}, session=True)
        rendered = browser.poll("document.querySelectorAll('.tt-chart[data-rendered=true] svg, "
                                ".tt-chart[data-rendered=true] canvas').length") or 0
        browser.drain(1.0)
        marks = browser.evaluate("document.querySelectorAll('.tt-chart svg .mark-line path, .tt-chart svg .mark-symbol path').length")
        # Hover a data point: vega's tooltip must name the token and its frequency.
        x, y = browser.evaluate("""(() => { const fig = document.querySelector('.tt-chart'); fig.scrollIntoView();
            const r = fig.querySelectorAll('svg .mark-symbol path')[3].getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2]; })()""")
        browser.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=True)
        browser.drain(1.0)
        tooltip = browser.evaluate("(document.querySelector('#vg-tooltip-element.visible') || {}).innerText") or ""
        shot = Path(os.environ.get("TWOTOWER_SCREENSHOT") or tmp_path / "chapter.png")
        shot.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]))
        # The ICA chapter: every chart draws, the heatmap from its per-word arrays (flattened in vega).
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/notebooks/05_ica.html"}, session=True)
        # Heatmap cells are counted in vega's scene graph: a large chart draws on a canvas (render.MAX_SVG_MARKS).
        ica = browser.poll("[document.querySelectorAll('.tt-chart').length, "
                           "document.querySelectorAll('.tt-chart[data-rendered=true]').length, "
                           "[...document.querySelectorAll('.tt-chart')].map(f => f.vegaView ? (function count(n) { "
                           "return !n ? 0 : n.marktype === 'rect' ? n.items.length : (n.items || []).reduce("
                           "(s, c) => s + count(c), 0); })(f.vegaView.scenegraph().root) : 0).reduce((a, b) => a + b, 0)]",
                           done=lambda v: 0 < v[0] == v[1])
        browser.drain(1.0)
        # MathJax, served from the book itself, typesets the model page's equations.
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/book/model.html"}, session=True)
        math = browser.poll("document.querySelectorAll('mjx-container').length") or 0
        browser.drain(1.0)
        # Section 03 as a reader sees it: the paper's Table 2 value under ours in the same cell.
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/notebooks/03_correlations.html"}, session=True)
        table2_cells = browser.poll("[...document.querySelectorAll('table.tt-paper-table td')].map(td => td.innerText)",
                                    done=lambda v: bool(v)) or []
        # The scorecard: its picture draws one dot per correlation, and the table gives paper and ours.
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/book/scorecard.html"}, session=True)
        dots = browser.poll("document.querySelectorAll('.tt-chart[data-rendered=true] svg .mark-symbol path').length") or 0
        browser.evaluate("document.querySelectorAll('main details').forEach(d => d.open = true)")   # one click away
        browser.drain(0.3)
        scorecard_rows = browser.evaluate("[...document.querySelectorAll('table tr')].map(tr => tr.innerText)") or []
        browser.drain(1.0)
        # No table is clipped at the window's 1,280 px, none scrolls in its own box, no page over its budget
        layout = measure_pages(browser, port, Path(built_book["html"]))
    finally:
        if browser is not None:
            browser.close()
        server.terminate()
        server.wait(10)
    cell = [c for c in table2_cells if "paper 0.57" in c]  # tiny: gpt-s1 vs bert-large-s1 (paper: GPT vs run 1)
    assert cell and re.match(r"^-?\d\.\d\d\s", cell[0]), table2_cells
    assert dots >= 1, "the scorecard's picture drew no dot"
    print("screens of 1280 x 800:", {p: round(v, 1) for p, v in layout["screens"].items()},
          "front page's table and tally end at", layout["first_screen"], "px")
    assert not layout_failures(layout), layout_failures(layout)
    same = [r for r in scorecard_rows if r.startswith("Table 2: Bert-large run 1 vs run 2")]
    assert same and "0.94" in same[0], scorecard_rows[:3]
    events = browser.events
    problems = page_problems(events, port)
    failed, errors, console, outside = (problems[k] for k in ("failed", "errors", "console", "outside"))
    assert rendered > 0, "no vega chart rendered"
    assert marks > 0, "the chart has no drawn marks"
    assert "token" in tooltip and "frequency" in tooltip, f"no tooltip on hover: {tooltip!r}"
    assert not failed and not errors and not console, (failed, errors, console)
    assert not outside, f"the page tried to reach the network: {outside}"
    assert math >= 4, "MathJax did not typeset the model page's equations"
    assert ica and ica[0] >= 3 and ica[0] == ica[1] and ica[2] >= 16, f"ICA charts (found, rendered, heatmap cells): {ica}"
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_a_built_book_named_by_the_environment_keeps_its_layout():
    """Issue 105's page rules on a book the suite does not build (the cpu book of a `make reproduce`):
    `TWOTOWER_BUILT_BOOK=<its _build/html> pytest tests/test_book.py -k named_by_the_environment -s`."""
    html = os.environ.get("TWOTOWER_BUILT_BOOK")
    if not html:
        pytest.skip("TWOTOWER_BUILT_BOOK names no built book (a run's _build/html)")
    html = Path(html)
    if not (html / "book" / "intro.html").exists():
        raise UserError(f"TWOTOWER_BUILT_BOOK={html} holds no built book (no book/intro.html)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        skip_or_fail_in_ci("chromium is not installed (apt-get install -y chromium)")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory",
                               str(html)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = None
    try:
        wait_for_port(port, 5)
        browser = Browser(chromium)
        layout = measure_pages(browser, port, html)
    finally:
        if browser is not None:
            browser.close()
        server.terminate()
        server.wait(10)
    print("screens of 1280 x 800:", {p: round(v, 1) for p, v in layout["screens"].items()},
          "front page's table and tally end at", layout["first_screen"], "px")
    assert len(layout["screens"]) >= 10, f"only {sorted(layout['screens'])} of the book's pages were found"
    assert not layout_failures(layout), layout_failures(layout)
    assert not page_problems(browser.events, port)["outside"], "a page tried to reach the network"


def test_no_committed_result_holds_a_path_of_the_machine_that_made_it():
    """results/ is committed and shown in the book: runs, data and commands are named relative to
    $TWOTOWER_RUNS / $TWOTOWER_DATA, never by an absolute path of one machine."""
    found = []

    def walk(value, where):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif isinstance(value, str) and re.search(r"(^|[\s=])(/|~/|[A-Z]:\\)[\w.]", value):
            found.append(f"{where}: {value[:120]}")

    files = sorted((ROOT / "results").rglob("*.json"))
    assert files
    for path in files:
        walk(json.loads(path.read_text()), str(path.relative_to(ROOT)))
    # logs and notes too (e.g. results/gpu/*.log: tracebacks name the machine's folders)
    machine_path = re.compile(r"(?<![\w.<>/-])(/(work|tmp|opt|root|home|usr|var|mnt|srv|Users)/|[A-Z]:\\)")
    for path in sorted(p for p in (ROOT / "results").rglob("*") if p.suffix in (".log", ".txt", ".md", ".csv")):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if machine_path.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, found[:10]


def test_a_committed_command_names_no_folder_of_the_machine():
    from twotower_lib.artifacts import portable_command

    cmd = portable_command("benchmarks/x.py", ["/work/a/runs/cpu/probing", "/tmp/exp/probing-old", "--top-n", "5",
                                                "results/probe/x.json"])
    assert cmd == "python benchmarks/x.py runs/cpu/probing probing-old --top-n 5 results/probe/x.json"
    assert portable_command("b.py", ["big=/tmp/exp/p3200000", "cpu=/work/a/runs/cpu/probing", "--note", "a=b"]) == \
        "python b.py big=p3200000 cpu=runs/cpu/probing --note a=b"


def test_a_rerun_is_compared_with_the_published_record_item_by_item(tmp_path, capsys):
    """`benchmarks/compare_published.py`: a copy of the published record, its verdicts over seeds decided by today's
    rules as a re-run's are, is the same in every verdict and r; a changed verdict and a moved r are counted and
    printed; a folder, or a record of another profile, is refused."""
    import copy
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_published", ROOT / "benchmarks" / "compare_published.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    from twotower_lib.book.scorecard import redecided

    published = json.loads((ROOT / "results" / "profiles" / "cpu.json").read_text())
    today = {**copy.deepcopy(published), "scorecard": redecided(published["scorecard"])}   # as a re-run writes it now
    same = compare.compare(today, published)
    assert same["verdicts_same"] == same["items"] == len(published["scorecard"]["rows"])
    assert same["identical_points"] == len(published["scorecard"]["points"]) and same["largest_change_of_r"] == 0
    rerun = copy.deepcopy(today)
    rerun["scorecard"]["rows"][1]["verdict"] = "reproduced" if published["scorecard"]["rows"][1]["verdict"] != "reproduced" else "not"
    rerun["scorecard"]["points"][0]["ours"] += 0.03
    moved = compare.compare(rerun, published)
    assert moved["verdicts_same"] == moved["items"] - 1 and moved["identical_points"] == len(published["scorecard"]["points"]) - 1
    assert moved["largest_change_of_r"] == pytest.approx(0.03)
    (tmp_path / "cpu.json").write_text(json.dumps(rerun))
    assert compare.main([str(tmp_path / "cpu.json"), "--out", str(tmp_path / "out.json")]) == 0
    assert "DIFFERS" in capsys.readouterr().out and json.loads((tmp_path / "out.json").read_text())["verdicts_same"] == moved["verdicts_same"]
    with pytest.raises(SystemExit, match="is not a file"):
        compare.main([str(tmp_path)])
    (tmp_path / "other.json").write_text(json.dumps({**rerun, "profile": "tiny"}))
    with pytest.raises(SystemExit, match="do not hold the same scorecard items"):
        compare.main([str(tmp_path / "other.json"), "--published", str(ROOT / "results" / "profiles" / "cpu.json")])


def test_the_intel_record_is_what_both_intel_reruns_gave():
    """What the rerun page says of Intel machines: the committed Intel record (`results/rerun/intel_record.json`, a
    re-run's `publish` record) holds the r its comparison with the published run read, and the two Intel re-runs,
    compared with the published run on two machines, read every r alike, bit for bit, and every verdict alike."""
    rerun = ROOT / "results" / "rerun"
    record, first, second = (json.loads((rerun / f"{name}.json").read_text())
                             for name in ("intel_record", "intel_pinned", "intel_second"))
    assert "Intel" in record["provenance"]["cpu"]["model"] and record["provenance"]["cpu_kernels"]["torch"] == "AVX2"
    assert [p["ours"] for p in record["scorecard"]["points"]] == [p["rerun"] for p in second["points"]]
    assert [(p["pair"], p["rerun"]) for p in first["points"]] == [(p["pair"], p["rerun"]) for p in second["points"]]
    assert [v["rerun"] for v in first["verdicts"]] == [v["rerun"] for v in second["verdicts"]]
    assert first["identical_points"] == second["identical_points"] < len(second["points"])   # neither is AMD's


@pytest.mark.slow
def test_the_probing_stage_floor_adds_up(built_book, tmp_path):
    """`benchmarks/probe_stage_floor.py` on a pipeline's probing folder: every probe with trained heads
    counted once, its FLOPs those of its steps, and the stage at the floor = the rest + heads at the floor."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_stage_floor", ROOT / "benchmarks" / "probe_stage_floor.py")
    floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor)
    probing = built_book["pipe"].root / "probing"
    with_heads = [m for m in probing.glob("**/manifest.json") if json.loads(m.read_text()).get("heads")]
    assert with_heads
    out = tmp_path / "floor.json"
    assert floor.main([str(probing), "--repeats", "2", "--out", str(out)]) == 0
    found = json.loads(out.read_text())
    rows, s = found["probes"], found["summary"]
    assert sorted(r["probe"] for r in rows) == sorted(m.parent.relative_to(probing).as_posix() for m in with_heads)
    for r in rows:
        steps = -(-r["positions"] // floor.BATCH) * r["epochs"] * r["heads"]
        assert 0 < r["head_gflop"] <= steps * floor.step_flops(r["H"], r["E"], r["V"]) / 1e9 + 0.001
        assert 0 <= r["head_seconds"] <= r["seconds"]
        # the floor adds one exp per logit to the products; at the tiny shapes both round to the same milliseconds
        assert 0 < r["head_seconds_at_products"] <= r["head_seconds_at_floor"]
    assert s["stage_minutes_at_floor"] == pytest.approx(s["outside_heads_minutes"] + s["head_minutes_at_floor"], abs=0.02)
    assert s["probe_minutes"] == pytest.approx(sum(r["seconds"] for r in rows) / 60, abs=0.01)
    assert floor.step_flops(128, 256, 8192) == 4 * 1024 * 128 * 8192 + 4 * 8192 * 256 * 128
    assert floor.step_flops(128, 128, 8192) == 4 * 1024 * 128 * 8192    # no fold where H = E
    with pytest.raises(SystemExit, match="no probe with trained heads"):
        floor.main([str(tmp_path)])


@pytest.mark.slow
def test_probings_at_several_sizes_are_compared_from_their_tables(built_book, tmp_path):
    """`studies/probe/positions.py` reads a probe's manifest and tables only (checked by sha256): the
    same probing given twice, once without its per-position files, agrees with itself at 1 and gives one
    pair r (with an interval only where doc_stats came along); a table from another probe is refused."""
    from studies.probe import positions

    root = built_book["pipe"].root
    probing, data = root / "probing", root / "data" / "prepared"
    light = tmp_path / "light"                            # as brought back from another machine: no per-position files
    for run in ("gpt-s1", "gpt-s2"):
        (light / run).mkdir(parents=True)
        for name in ("manifest.json", "preference.parquet"):
            shutil.copy(probing / run / name, light / run / name)
    out = tmp_path / "positions.json"
    assert positions.main([f"full={probing}", f"light={light}", "--data", str(data), "--profile", "tiny",
                           "--n-boot", "50", "--out", str(out)]) == 0
    full, light_row = json.loads(out.read_text())["rows"]
    (pair,), (light_pair,) = full["pairs"], light_row["pairs"]
    assert "ci_low" in pair["r_score"] and "ci_low" not in light_pair["r_score"]  # doc_stats only in the full probe
    assert pair["r_score"]["r"] == light_pair["r_score"]["r"] and (pair["a"], pair["b"]) == ("gpt-s1", "gpt-s2")
    for run in ("gpt-s1", "gpt-s2"):
        assert full["runs"][run]["agreement_with_last"] == {"score": 1.0, "score_logmean": 1.0}
    shutil.copy(probing / "gpt-s2" / "preference.parquet", light / "gpt-s1" / "preference.parquet")
    with pytest.raises(SystemExit, match="sha256 does not match"):
        positions.main([f"full={probing}", f"light={light}", "--data", str(data), "--profile", "tiny"])
    with pytest.raises(SystemExit, match="two different runs"):
        positions.main([f"full={probing}", f"light={light}", "--data", str(data), "--pair", "gpt-s1,gpt-s1"])


def test_the_committed_probe_comparisons_are_shown():
    from studies.probe import report as probe_studies

    cases = probe_studies.probe_change()
    assert not isinstance(cases, str) and {"elmo-s1", "gpt-s1", "bert-base-s1"} <= set(cases.index)
    agree = cases.filter(like="agreement")
    assert agree.shape[1] == 2 and ((agree.abs() <= 1).all().all())
    assert isinstance(probe_studies.probe_change(ROOT / "results" / "probe" / "absent.json"), str)
    # the defined head, and four times the positions, against the default: every two cases under each probe
    for name in ("defined_cases.json", "positions_800k_cases.json"):
        between = probe_studies.probe_change(probe_studies.RESULTS / name, between_runs=True)
        assert ("gpt-s1", "gpt-s2") in between.index and between.shape[1] == 4
        assert ((between.abs() <= 1).all().all())
    # one pair at several training sizes: the largest agrees with itself, one pair r per probing
    for name in ("positions_cases.json", "positions_largest.json"):
        sizes = probe_studies.training_positions(probe_studies.RESULTS / name)
        runs, pairs = sizes["runs"], sizes["pairs"]
        last = runs.index.get_level_values("probing")[-1]
        assert (runs.loc[last].filter(like=f"agreement with {last}") == 1.0).all().all()
        most = runs["training positions"].groupby(level="probing", sort=False).max()
        assert most.idxmax() == last                                  # the last probing saw the most positions
        for run, matrix in sizes["agreement"].groupby(level="run"):
            m = matrix.droplevel("run")
            assert (m.to_numpy().diagonal() == 1).all() and (m == m.T).all().all()   # every two probings, once each way
        assert pairs.index.get_level_values("pair").is_unique is False and (pairs.filter(like="r (").abs() <= 1).all().all()
    assert isinstance(probe_studies.training_positions(ROOT / "results" / "probe" / "absent.json"), str)
    # noise or bias: the committed draws, stepped up, and the pair corrected for their noise alone
    noise = probe_studies.probe_data_noise()
    runs = noise["runs"]
    assert np.allclose(runs["with an exact probe, if noise only"], np.sqrt(runs["draws agree"]))
    assert (runs.filter(like="reliability at").iloc[:, 0] > runs["draws agree"]).all()     # twice the positions
    pair = noise["pairs"].iloc[0]
    assert pair["r corrected for noise"] == pytest.approx(pair["r at cpu-198k"] / pair["noise ceiling"])
    with pytest.raises(UserError, match="has no probing"):
        probe_studies.probe_data_noise(draws=("cpu-99k-a", "absent"))


def test_the_committed_optimum_measurements_are_shown(tmp_path):
    """Section 02's tables of `studies/probe/optimum_experiments.py`: one row per experiment, recipe and tower with
    its held-out loss and certificate, and every two recipes of an experiment compared once."""
    from studies.probe import report as probe_studies

    found = probe_studies.optimum_benchmark()
    recipes, agreement = found["recipes"], found["agreement"]
    assert {"halves", "calibrated", "lbfgs"} <= set(recipes.index.get_level_values("experiment"))
    assert {"held-out loss", "count gap median", "run", "training positions"} <= set(recipes.columns)
    assert (recipes.groupby(level=["experiment", "recipe"]).size() == 2).all()     # both towers of every recipe
    for experiment, rows in recipes.groupby(level="experiment"):
        n = rows.index.get_level_values("recipe").nunique()
        pairs = agreement.loc[experiment]
        assert len(pairs) == n * (n - 1) // 2                     # each unordered pair once
        assert {frozenset(p) for p in pairs.index} == {frozenset((a, b)) for a in rows.index.get_level_values(1)
                                                       for b in rows.index.get_level_values(1) if a != b}
    assert ((agreement.abs() <= 1).all().all())
    counterparts = {(a, b) for _, a, b in found["counterparts"].index}
    assert {("adam-whiten+refined15", "adam+refined15"), ("half1:adam", "half2:adam")} <= counterparts
    assert not {("adam", "adam+refined15"), ("adam-whiten", "half1:adam")} & counterparts
    assert probe_studies.optimum_benchmark(tmp_path) == {}


@pytest.mark.slow
def test_a_number_in_the_prose_follows_a_parameter(built_book, tmp_path):
    """Section 03's result sentence is written by code: re-run with another top_n, its text changes with it."""
    from twotower_lib.book import pipeline

    pipe = built_book["pipe"]
    runs = tmp_path / "runs"
    shutil.copytree(pipe.root, runs / "tiny")

    def result_text(p) -> str:
        nb = nbformat.read(p.executed(next(s for s in p.sections if s.name == "03_correlations")), as_version=4)
        return "\n".join(o["data"].get("text/markdown", "") for c in nb.cells for o in c.get("outputs", []) if "data" in o)

    n = pipe.profile.analysis.top_n
    assert f"over the top {n} tokens" in result_text(pipe)
    changed = pipeline.make_pipeline("tiny", {**pipe.overrides, "analysis.top_n": str(n - 10)}, runs)
    ran = changed.run("03_correlations", log=print)  # 02 reads top_n too (its reliability): it re-runs, reusing its probes
    assert ran[-1] == "03_correlations" and set(ran) <= {"02_probing", "03_correlations"}
    assert f"over the top {n - 10} tokens" in result_text(changed) and f"over the top {n} tokens" not in result_text(changed)
