"""The documentation site, built in strict mode and rendered in a real headless browser.

The site is built here, into a temporary folder (`mkdocs build --strict`: a broken link or
anchor, a page left out of the navigation or an unresolved API reference fails), served on a
local port and opened in headless Chromium (tests/browser.py): the start page and the config
reference must show their headings, the config reference every key of the schema, and no page
may log an error or fail to load a resource. Skipped, with the reason, where the docs extra
(`make docs` installs it) or Chromium (`make docs` installs it where it can) is missing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from browser import Chromium, find_chromium, serving
from test_docs import schema_keys

ROOT = Path(__file__).resolve().parents[1]
# One worker builds the site once for this module's tests (make test runs pytest -n 2).
pytestmark = pytest.mark.xdist_group("docs_site")
NO_DOCS_EXTRA = "the docs extra is not installed (`make docs` installs it into .venv)"
NO_CHROMIUM = (
    "Chromium is not installed: no chromium, chromium-browser or google-chrome on PATH (on Debian "
    "or Ubuntu `apt-get install chromium`; `make docs` installs it where it can)"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built in strict mode into a fresh folder."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip(NO_DOCS_EXTRA)
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    binary = find_chromium()
    if binary is None:
        pytest.skip(NO_CHROMIUM)
    chromium = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield chromium
    finally:
        chromium.close()


def test_the_strict_build_writes_every_page(site):
    for page in ("index.html", "reference/config/index.html", "reference/cli/index.html"):
        assert (site / page).is_file(), page
    api = (site / "reference/api/index.html").read_text(encoding="utf-8")
    assert 'id="graft.trainer.train"' in api and 'id="graft.types.Verdict"' in api
    benchmarks = (site / "benchmarks/index.html").read_text(encoding="utf-8")
    assert "Trajectory store overhead" in benchmarks and "--8&lt;--" not in benchmarks


def test_start_page_and_config_reference_render_without_errors(site, browser):
    with serving(site) as base:
        start = browser.load(base)
        config = browser.load(base + "reference/config/", selectors=("td:first-child code",))
    assert start.title == "graft"
    assert start.headings[:5] == ["graft", "Start here", "Concepts", "Guides", "Reference"]
    assert start.errors == [], start.errors

    assert config.title.startswith("Config keys")
    assert config.headings[0] == "Config keys"
    for section in ("run", "task.math", "models.N", "models.N.optim", "rollout", "algo", "sft"):
        assert section in config.headings, f"no heading {section!r} in {config.headings}"
    shown = set(config.found["td:first-child code"])
    missing = [key for key in schema_keys() if key not in shown]
    assert not missing, f"the rendered config reference lacks {missing}"
    assert config.errors == [], config.errors
