"""The learning curves as a web page that draws without a network (`mmtr plots`).

`dvc plots show` writes ``dvc_plots/index.html``, whose page loads Vega, Vega-Lite and vega-embed from a CDN: a
blank page on a machine without internet. Given an HTML template that leaves out DVC's ``{scripts}`` field
(``--html-template``, or ``plots.html_template`` in DVC's config), DVC puts no script tag of its own in the page. This
module writes such a template with the three libraries inline, from the JavaScript bundle that the installed
vl-convert-python makes (extra ``plots``), and runs `dvc plots show` with it. It also names the template in
``.dvc/config.local`` (this clone's own DVC config, not committed), so that a plain `dvc plots show` draws offline
from then on.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from common.errors import InputError
from common.files import write_text

# DVC's templates are Vega-Lite 5 specs: the newest Vega-Lite 5 that the pinned vl-convert-python bundles
VEGA_LITE = "5.21"
# what DVC's chart scripts call (vegaEmbed) and its dependencies, set on the page's window
GLOBALS = "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;"
TEMPLATE = "plots/offline-page.html"  # in the .dvc folder, as DVC's config names it (relative to .dvc)
DEFAULT_OUT = "dvc_plots"  # DVC's own default
# DVC fills its template fields by plain text replacement, and an HTML parser ends a script at "</script" (any case)
_UNSAFE_IN_BUNDLE = ("</script", "<!--", "{plot_divs}", "{scripts}", "{refresh_tag}")

_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{refresh_tag}
<title>Learning curves</title>
<style>
body { font-family: sans-serif; margin: 1em; }
body > div { margin-bottom: 2em; }
</style>
"""
_TAIL = """</head>
<body>
{plot_divs}
</body>
</html>
"""


def page_template(bundle: str, libraries: str) -> str:
    """A `dvc plots show` HTML template holding ``bundle`` (JavaScript that sets ``window.vegaEmbed``) inline.

    The bundle runs inside a function, so that its own top-level names stay out of the page's global scope, where
    DVC's chart scripts declare ``var spec``.

    Raises:
        InputError: the bundle holds text that would end its script tag early or that DVC would replace.
    """
    lowered = bundle.lower()
    found = [marker for marker in _UNSAFE_IN_BUNDLE if marker in lowered]
    if found:
        raise InputError(f"the JavaScript bundle ({libraries}) holds {found[0]!r}: it cannot be inlined in the page")
    script = f"<!-- {libraries}: inline, so that the page loads nothing from the network -->\n"
    return _HEAD + script + "<script>\n(() => {\n" + bundle + "\n})();\n</script>\n" + _TAIL


def javascript_bundle() -> tuple[str, str]:
    """Vega, Vega-Lite and vega-embed as one script, and a line naming their versions.

    Raises:
        InputError: vl-convert-python is not installed.
    """
    try:
        import vl_convert
    except ImportError:
        raise InputError(
            "the offline plots page takes Vega's JavaScript from vl-convert-python, which is not installed: "
            "pip install -c constraints.txt 'mmtr[plots]' (make install does)"
        ) from None
    libraries = (
        f"Vega {vl_convert.get_vega_version()}, Vega-Lite {VEGA_LITE}, vega-embed "
        f"{vl_convert.get_vega_embed_version()} (vl-convert-python {version('vl-convert-python')})"
    )
    return vl_convert.javascript_bundle(GLOBALS, vl_version=VEGA_LITE), libraries


def repository_root(start: Path) -> Path:
    """The DVC repository ``start`` lies in: the nearest folder at or above it that holds ``.dvc``.

    Raises:
        InputError: none does.
    """
    for folder in (start.resolve(), *start.resolve().parents):
        if (folder / ".dvc").is_dir():
            return folder
    raise InputError(f"{start}: not inside a DVC repository (no .dvc folder here or above)")


def write_page_template(repo: Path) -> Path:
    """Write the offline HTML template into ``repo``'s .dvc folder (git-ignored) and return its path."""
    bundle, libraries = javascript_bundle()
    path = repo / ".dvc" / TEMPLATE
    write_text(path, page_template(bundle, libraries))
    return path


def _dvc(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # DVC's stderr (warnings such as a plot file it could not read) goes to the user as it is
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, stdout=subprocess.PIPE, text=True, check=False
    )


def use_offline_template(repo: Path) -> str:
    """Name the offline template in ``repo``'s .dvc/config.local, unless a DVC config names a template already;
    return what was done."""
    configured = _dvc(repo, "config", "plots.html_template")
    current = configured.stdout.strip() if configured.returncode == 0 else ""
    if current == TEMPLATE:
        return f"`dvc plots show` uses .dvc/{TEMPLATE} (DVC config plots.html_template)"
    if current:
        return f"`dvc plots show` keeps the template your DVC config names ({current}); `mmtr plots` draws offline"
    done = _dvc(repo, "config", "--local", "plots.html_template", TEMPLATE)
    if done.returncode != 0:
        raise InputError(f"{repo}: `dvc config --local plots.html_template {TEMPLATE}` failed")
    return f"`dvc plots show` now uses .dvc/{TEMPLATE} too (set in .dvc/config.local, this clone only)"


def draw(repo: Path, out: Path) -> Path:
    """`dvc plots show` in ``repo`` with the offline template, the page written into ``out``; return the page.

    Raises:
        InputError: vl-convert-python is missing, DVC fails, or there is no plot to draw.
    """
    template = write_page_template(repo)
    page = out / "index.html"
    page.unlink(missing_ok=True)  # DVC writes no page when it finds no plot: an old one must not pass for new
    shown = _dvc(repo, "plots", "show", "--html-template", str(template), "--out", str(out.resolve()))
    if shown.returncode != 0:
        raise InputError(f"{repo}: `dvc plots show` failed (exit status {shown.returncode}; its error is above)")
    if not page.is_file():
        raise InputError(f"{repo}: `dvc plots show` drew no plot (have the stages that write the curves run?)")
    return page
