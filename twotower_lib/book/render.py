"""Offline rendering of the book's charts: Altair's default HTML loads vega from a CDN, so charts are blank
offline. `enable()` installs a renderer whose output carries, per chart:
- `text/html`: a module script that imports the vega bundle shipped with the book
  (`_static/vega/`, written by `write_bundle`) and draws the interactive chart (tooltips,
  zoom/pan); it sits over a static PNG, which stays visible where the bundle is absent
  (e.g. in Jupyter) and is what gets printed;
- `image/png`: the same static image, which Sphinx's LaTeX/PDF builders pick.
Nothing is fetched from the network, by the book or by the static export (vl-convert).
"""

from __future__ import annotations

import base64
import html
import json
import uuid
from pathlib import Path
from typing import Any

from twotower_lib.book.charts import alt  # altair, imported with the setting that keeps a kernel fast

# The vega-lite version altair writes specs for; the bundle is built for the same one.
VL_VERSION = alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0]          # e.g. "6.4"
BUNDLE_NAME = f"vega-bundle-vl{VL_VERSION}.mjs"                       # .mjs: jupyter-book auto-loads every .js


def write_bundle(static_dir: str | Path) -> Path:
    """Write the vega + vega-lite + vega-embed bundle to `static_dir/vega/` (once; ~0.9 MB)."""
    import vl_convert as vlc

    path = Path(static_dir) / "vega" / BUNDLE_NAME
    if not path.exists():
        from twotower_lib.artifacts import atomic_write_text

        atomic_write_text(path, vlc.javascript_bundle(vl_version=VL_VERSION))
    return path


def static_png(spec: dict[str, Any], scale: float = 1.5) -> bytes:
    """The chart as a PNG, rendered locally by vl-convert (for print and PDF)."""
    import vl_convert as vlc

    return vlc.vegalite_to_png(spec, scale=scale, vl_version=VL_VERSION)


_HTML = """<figure class="tt-chart" id="{id}" style="margin:0 0 1em 0">
<div class="tt-live"></div>
<img class="tt-static" alt="{alt}" src="data:image/png;base64,{png}" style="max-width:100%">
<style>@media print {{ #{id} .tt-live {{ display:none }} #{id} .tt-static {{ display:block !important }} }}</style>
<script type="module">
const fig = document.getElementById("{id}");
// In the built book the bundle sits next to Sphinx's documentation_options.js; elsewhere keep the PNG.
const docs = document.querySelector('script[src*="_static/documentation_options.js"]');
if (docs) {{
  await import(new URL("vega/{bundle}", docs.src).href);
  const shown = await window.vegaEmbed(fig.querySelector(".tt-live"), {spec},
      {{renderer: "{renderer}", actions: {{export: true, source: false, compiled: false, editor: false}}}});
  fig.vegaView = shown.view;  // the chart's vega View, for the console (and the book's browser test)
  fig.querySelector(".tt-static").style.display = "none";
  fig.dataset.rendered = "true";
}}
</script>
</figure>"""


# Above this many marks a chart draws on a canvas, not as SVG: a browser lays out one SVG element a mark, and a
# chapter's scatter of every token or heatmap of every word's components as SVG keeps its page from answering for
# tens of seconds.
MAX_SVG_MARKS = 2_000


def marks(spec: dict[str, Any]) -> int:
    """About how many marks a spec draws: a row of its inline datasets each, a row holding arrays (flattened in
    the browser, `charts.component_heatmap`) one per element of its longest."""
    return sum(max((len(v) for v in row.values() if isinstance(v, list)), default=1)
               for rows in spec.get("datasets", {}).values() for row in rows if isinstance(row, dict))


def renderer(spec: dict[str, Any]) -> str:
    """vega's renderer for a spec: SVG (crisp, one element a mark) up to `MAX_SVG_MARKS` marks, else canvas."""
    return "svg" if marks(spec) <= MAX_SVG_MARKS else "canvas"


def mimebundle(spec: dict[str, Any]) -> dict[str, Any]:
    """Interactive offline HTML + static PNG for one vega-lite spec."""
    png = static_png(spec)
    title = spec.get("title")
    title = title.get("text") if isinstance(title, dict) else title
    spec_js = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")  # never close the script early
    return {
        "text/html": _HTML.format(id=f"tt-{uuid.uuid4().hex[:12]}", alt=html.escape(str(title or "chart")),
                                  png=base64.b64encode(png).decode(), spec=spec_js, bundle=BUNDLE_NAME,
                                  renderer=renderer(spec)),
        "image/png": base64.b64encode(png).decode(),
        "text/plain": f"<chart: {title or 'untitled'}>",
    }


class SavedChart:
    """A chart saved as Vega-Lite JSON (e.g. a study's book part), displayed like a live one."""

    def __init__(self, spec_json: str):
        self.spec = json.loads(spec_json)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return mimebundle(self.spec)


def _renderer(spec: dict[str, Any], **_: Any) -> dict[str, Any]:
    return mimebundle(spec)


def enable() -> None:
    """Make every altair chart displayed in this kernel render offline (call once per notebook)."""
    alt.renderers.register("twotower", _renderer)
    alt.renderers.enable("twotower")
    alt.data_transformers.disable_max_rows()  # 5000 tokens x 5 cases exceeds altair's default guard
