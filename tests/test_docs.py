"""The documentation stays true to the code: the generated reference pages equal a fresh
generation, the config reference names every key of the schema, the command-line reference holds
exactly what every `graft COMMAND --help` prints, and the README stays a short front page whose
example config loads. (The built site, in a headless browser: test_docs_site.py.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from typing import get_args, get_origin, get_type_hints

import pytest

from graft.cli import main
from graft.config import AlgoConfig, Config, load_config
from graft.config.lib import field_docs
from graft.store.schema import RECORD, SCHEMA, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _script(name: str):
    """A module of scripts/, imported by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen_docs = _script("gen_docs")
docs_hooks = _script("docs_hooks")


def schema_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every leaf key a user sets, walked from the dataclasses themselves (not through the code
    that writes the reference), with `N` for a list's entries; the internal switches (that change
    no result) are not among them."""
    keys = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        tp = get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            keys += schema_keys(tp, f"{prefix}{f.name}.")
        elif get_origin(tp) is tuple and dataclasses.is_dataclass(get_args(tp)[0]):
            keys += schema_keys(get_args(tp)[0], f"{prefix}{f.name}.N.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def test_generated_pages_equal_a_fresh_generation():
    stale = gen_docs.stale_pages()
    assert not stale, f"stale: {stale}; run `python scripts/gen_docs.py` and commit the pages"


def test_config_reference_lists_every_key_of_the_schema():
    page = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([^`]+)` \|", page, flags=re.MULTILINE)
    keys = schema_keys()
    assert len(keys) > 100
    missing = [k for k in keys if k not in listed]
    assert not missing, f"docs/reference/config.md lacks {missing}"
    assert not [k for k in listed if k not in keys and k != "models"], "keys the schema lacks"


def test_the_record_reference_documents_every_column_the_writer_writes():
    """docs/reference/store.md is generated from the writer's schema; a column the writer gains
    without a meaning, or a page not regenerated, fails here."""
    page = (DOCS / "reference" / "store.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([^`]+)` \|", page, flags=re.MULTILINE)
    assert listed == list(SCHEMA.names) == [c.name for c in RECORD]
    for column in RECORD:
        assert len(column.doc.split()) >= 3, f"store column {column.name}: no meaning written"
        assert 1 <= column.added_in <= SCHEMA_VERSION, column.name
    assert "round` | `int16` | 2 |" in page and "log_reward` | `double` | 3 |" in page


def test_switches_that_change_no_result_stay_out_of_the_reference_and_still_work():
    internal = [f for f in dataclasses.fields(AlgoConfig) if f.metadata.get("internal")]
    docs = field_docs(AlgoConfig)
    assert {f.name for f in internal} == {
        "skip_zero_advantage",
        "sort_by_length",
        "share_prompts",
        "dedup_responses",
    }
    page = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    for f in internal:
        assert "Changes no result" in docs[f.name], f.name  # only such switches are hidden
        assert f"algo.{f.name}" not in page
        cfg = load_config(Config, None, [f"algo.{f.name}=false"])  # settable all the same
        assert getattr(cfg.algo, f.name) is False


def test_config_reference_states_what_the_checks_accept():
    rows = {row.key: row for row in gen_docs.key_docs()}
    assert rows["rollout.group_size"].accepts == "in [2, 32767]"
    assert rows["models.N.optim.lr"].accepts.startswith("in (0, 1]")
    assert rows["models.N.lora.dropout"].accepts == "in [0, 1)"
    assert rows["run.out_dir"].accepts.startswith("must not be empty")
    assert rows["run.seed"].accepts == ""  # nothing checked beyond the type
    assert rows["rollout.group_size"].default == "8" and rows["rollout.group_size"].type == "int"


def test_config_docs_command_prints_every_key(capsys):
    assert main(["config", "--docs"]) == 0
    out = capsys.readouterr().out
    printed = {line.split("  (", 1)[0] for line in out.splitlines() if not line.startswith(" ")}
    assert set(schema_keys()) <= printed
    assert "    accepts: in [2, 32767]" in out


def _help_blocks(page: str) -> dict[str, str]:
    """`graft ...` heading -> the help text in the fenced block below it."""
    block = re.compile(r"^## (graft[^\n]*)\n(?:.*?\n)??```text\n(.*?)\n```$", re.M | re.S)
    return {m.group(1): m.group(2) for m in block.finditer(page)}


def test_cli_reference_matches_every_commands_help(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(gen_docs.HELP_COLUMNS))
    blocks = _help_blocks((DOCS / "reference" / "cli.md").read_text(encoding="utf-8"))
    commands = [path for path, _, _ in gen_docs.commands(gen_docs.build_parser())]
    assert {("train",), ("store", "export"), ("code", "audit")} <= set(commands)
    for path in commands:
        with pytest.raises(SystemExit):
            main([*path, "--help"])
        name = " ".join(("graft", *path))
        assert name in blocks, f"docs/reference/cli.md has no section for `{name}`"
        assert blocks[name] == capsys.readouterr().out.rstrip(), f"`{name} --help` differs"
    assert len(blocks) == len(commands)


def test_a_stale_page_is_named_by_check(tmp_path, monkeypatch, capsys):
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    monkeypatch.setattr(gen_docs, "ROOT", tmp_path)
    assert gen_docs.main(["--check"]) == 1
    assert "docs/reference/cli.md is stale" in capsys.readouterr().err
    assert gen_docs.main([]) == 0 and gen_docs.main(["--check"]) == 0


def test_readme_is_a_short_front_page_whose_example_config_loads(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert readme.startswith("# graft\n\n```bash\nmake demo    # set up .venv, then GRPO vs GRAFT")
    for heading in ("What you will see", "Install beside your own torch", "Where to go next"):
        assert f"\n## {heading}\n" in readme
    example = re.search(r"```yaml\n(# my_pair.yaml\n.*?)```", readme, re.S)
    assert example, "the README's own-pair example config is gone"
    (tmp_path / "my_pair.yaml").write_text(example.group(1))
    cfg = load_config(Config, tmp_path / "my_pair.yaml")
    assert len(cfg.models) == 2 and cfg.exchange.enabled and cfg.task.name == "math"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_layout_page_names_every_package():
    layout = (DOCS / "guides" / "layout.md").read_text(encoding="utf-8")
    package = ROOT / "src" / "graft"
    for path in sorted(p for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert f"\n  {path.name}/ " in layout, f"docs/guides/layout.md does not name {path.name}/"


def test_included_files_have_their_links_rebased():
    text = "see [evidence](docs/evidence.md#setup), [b](BENCHMARKS.md), [w](https://x.org/a.md)"
    assert docs_hooks.rebase_links(text, "benchmarks.md") == (
        "see [evidence](evidence.md#setup), [b](benchmarks.md), [w](https://x.org/a.md)"
    )
    assert "](../method.md)" in docs_hooks.rebase_links("[m](docs/method.md)", "guides/x.md")
    page = docs_hooks.include('<!-- x -->\n--8<-- "BENCHMARKS.md"\n', "benchmarks.md")
    assert page.startswith("<!-- x -->\n# Benchmarks") and "](docs/" not in page


def test_lists_are_written_as_python_markdown_reads_them():
    text = "Para:\n- a\n  - b\n    more\n- c\n\nText\n```\n- code\n  - kept\n```\n"
    assert docs_hooks.sane_lists(text) == (
        "Para:\n\n- a\n    - b\n    more\n- c\n\nText\n```\n- code\n  - kept\n```\n"
    )


def test_every_benchmarks_section_names_the_commit_its_numbers_come_from():
    """BENCHMARKS.md: each `## ` section names at least one commit, and every commit it names is
    in this repository's history (where the whole history is here: a full clone, not a shallow
    one or an unpacked wheel)."""
    import subprocess

    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert len(sections) > 10
    named = re.compile(r"\b(?:commit|commits|at|from)\s+`?([0-9a-f]{7,40})\b")
    history = (ROOT / ".git").exists() and subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip() == "false"  # a shallow clone lacks the older commits
    for section in sections:
        title = section.split("\n", 1)[0]
        commits = set(named.findall(section))
        assert commits, f"BENCHMARKS.md, '{title}': names no commit"
        for commit in sorted(commits) if history else ():
            found = subprocess.run(
                ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True
            )
            assert found.returncode == 0, f"BENCHMARKS.md, '{title}': {commit} is not a commit"


def _demo_writes() -> set[Path]:
    """Every path `make demo` (graft demo, its defaults) writes: its results and each run."""
    from graft.evidence.demo import DemoSettings, run_configs

    s = DemoSettings.make()
    root = Path("runs/demo")
    written = {root / name for name in ("results.json", "results.md", "curves.png")}
    for regime in s.regimes:
        for seed in s.seeds:
            for cfgs in run_configs(s, root, regime, seed).values():
                written |= {Path(c.run.out_dir) for c in cfgs}
    return written


def test_every_demo_path_the_docs_name_is_one_the_demo_writes():
    """A guide's `graft compare runs/demo/latent` outlived the folder (the demo now writes
    runs/demo/code): every runs/demo path in the README and the docs must be one the demo
    writes, or a folder above one."""
    written = _demo_writes()
    above = written | {parent for path in written for parent in path.parents}
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    named = {
        (page.relative_to(ROOT), found.rstrip(".,;:)`'\""))
        for page in pages
        for found in re.findall(r"runs/demo[\w/.-]*", page.read_text(encoding="utf-8"))
    }
    assert len(named) >= 3
    stale = sorted(f"{page}: {path}" for page, path in named if Path(path) not in above)
    assert not stale, stale


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^(## .*)$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def test_every_design_reads_as_it_did_at_its_design_commit():
    """docs/evidence.md: each section fixed before its runs is named in "Design commits" with the
    commit that added it, and reads today exactly as at that commit; results and later notes
    live elsewhere (a sentence once added to the baselines design after its results)."""
    import subprocess

    text = (DOCS / "evidence.md").read_text(encoding="utf-8")
    sections = _sections(text)
    table = dict(re.findall(r"^\| (.+?) \| ([0-9a-f]{7,40}) \|$", sections["## Design commits"],
                            flags=re.MULTILINE))  # fmt: skip
    designs = {h: body for h, body in sections.items() if "fixed before its runs" in h}
    assert len(designs) >= 4
    named = {h: c for title, c in table.items() for h in designs if h.startswith(f"## {title} (")}
    assert named.keys() == designs.keys(), sorted(set(designs) - set(named))
    if (
        not (ROOT / ".git").exists()
        or subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        != "false"
    ):
        return  # the history is not here (an unpacked wheel, a shallow clone)
    for heading, commit in named.items():
        first = subprocess.run(
            ["git", "log", "--reverse", "--format=%H", "-S", heading, "--", "docs/evidence.md"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert first and first[0].startswith(commit), f"{heading}: added at {first[:1]}"
        then = subprocess.run(["git", "show", f"{commit}:docs/evidence.md"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert _sections(then)[heading] == designs[heading], f"{heading} changed since {commit}"
