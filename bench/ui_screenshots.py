"""The docs' screenshots, taken in a real browser after `make demo`: the Prefect UI's runs list, the log of the newest
`train_mmt` run, and the top of the HTML report.

    python bench/ui_screenshots.py                    # from the repository root, after `make demo`
    python bench/ui_screenshots.py --out /tmp/shots   # elsewhere than docs/img

It serves the UI on the demo's database (`python -m mmtr.local_server ui`, stopped at the end), asks the API for the
run, and runs a headless Chromium (``chromium``, ``chromium-browser`` or ``google-chrome`` on PATH) once per page; the
pages are written as PNG files of 128 colours (the UI's flat colours lose nothing that matters, the files shrink
threefold).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
UI_LINE = "Prefect UI: "  # what `mmtr.local_server ui` prints first, with the address it serves


def browser() -> str:
    """The first headless-capable browser on PATH.

    Raises:
        SystemExit: none is installed.
    """
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    raise SystemExit(f"no browser on PATH (looked for {', '.join(BROWSERS)}): install Chromium")


def screenshot(executable: str, url: str, out: Path, size: tuple[int, int]) -> None:
    """``url`` as a PNG of ``size`` pixels: the page is given 20 s of its own time to load its data and draw."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                executable,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}",
                "--virtual-time-budget=20000",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    Image.open(out).convert("RGB").quantize(colors=128, dither=Image.Dither.NONE).save(out, optimize=True)
    print(f"{out}: {out.stat().st_size:,} bytes")


def newest_run(api: str, flow: str) -> str:
    """The id of the newest run of ``flow``.

    Raises:
        SystemExit: the database holds no run of it (run `make demo` first).
    """
    query = {"flows": {"name": {"any_": [flow]}}, "sort": "START_TIME_DESC", "limit": 1}
    runs = httpx.post(f"{api}/flow_runs/filter", json=query, timeout=30).raise_for_status().json()
    if not runs:
        raise SystemExit(f"no {flow} run in the database of .prefect/: run `make demo` first")
    return str(runs[0]["id"])


def start_ui(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`mmtr.local_server ui` on the demo's database (its output in ``log``), and the address it serves once it
    answers."""
    with log.open("wb") as output:
        server = subprocess.Popen([sys.executable, "-m", "mmtr.local_server", "ui"], cwd=REPO, stderr=output)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = [line for line in log.read_text(errors="replace").splitlines() if UI_LINE in line]
        if lines:
            ui = lines[0].split(UI_LINE, 1)[1].split()[0]
            try:
                if httpx.get(f"{ui}/api/health", timeout=2).is_success:
                    return server, ui
            except httpx.HTTPError:
                pass
        if server.poll() is not None:
            break
        time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"the Prefect UI did not answer within 120 s (see {log})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img", help="folder of the PNG files")
    args = parser.parse_args()
    report = REPO / "data" / "reports" / "index.html"
    if not report.is_file():
        raise SystemExit(f"{report}: not found (run `make demo` first)")
    executable = browser()
    args.out.mkdir(parents=True, exist_ok=True)
    server, ui = start_ui(REPO / ".prefect" / "screenshots-ui.log")
    try:
        run = newest_run(f"{ui}/api", "train_mmt")
        screenshot(executable, f"{ui}/runs", args.out / "prefect-runs.png", (1440, 2020))
        screenshot(executable, f"{ui}/runs/flow-run/{run}", args.out / "prefect-train-mmt-log.png", (1440, 2300))
    finally:
        server.send_signal(signal.SIGTERM)  # the UI command stops its server and exits
        server.wait(timeout=90)
    screenshot(executable, report.as_uri(), args.out / "report.png", (1280, 1500))


if __name__ == "__main__":
    main()
