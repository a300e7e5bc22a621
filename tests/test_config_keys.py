"""The exchange section's shape: the paper's keys, `exchange.ablation.*` and `exchange.stored.*`;
config files and overrides of the earlier, flat shape still load, each moved key with one warning
that names its new key."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from graft.cli import main
from graft.config import AblationConfig, Config, ConfigError, StoredPeerConfig, load_config
from graft.config.lib import MOVED, ConfigDeprecationWarning, current_shape, to_dict

OLD_FLAT = {
    "weight": "receiver_relative",
    "eos_in_score": False,
    "replacement": "success_only",
    "peer_position": "first",
    "selection": "random",
    "admission": "random",
    "peer_update": "luffy",
    "sgt_coef": 0.3,
    "luffy_gamma": 0.2,
    "store": "runs/peer/trajectories",
    "peer_model": "llama",
    "peer_run": "run-1",
    "peer_records": "step",
    "peer_step": 7,
    "peer_rewards": "shuffled",
    "skip_damaged_shards": True,
}
"""Every key the flat exchange section had beyond the paper's, each away from its default."""


def _old_yaml(tmp_path, exchange):
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"exchange": {"source": "stored", **exchange}}))
    return path


def test_every_key_of_the_flat_shape_has_moved():
    assert sorted(k.split(".", 1)[1] for k in MOVED) == sorted(OLD_FLAT)


def test_a_config_of_the_flat_shape_loads_to_the_same_values_with_one_warning_per_key(tmp_path):
    with pytest.warns(ConfigDeprecationWarning) as caught:
        old = load_config(Config, _old_yaml(tmp_path, OLD_FLAT))
    said = sorted(str(w.message) for w in caught)
    assert said == sorted(f"config key {k} is deprecated; it is now {v}" for k, v in MOVED.items())
    assert old.exchange.ablation == AblationConfig(
        weight="receiver_relative",
        eos_in_score=False,
        replacement="success_only",
        peer_position="first",
        selection="random",
        admission="random",
        peer_update="luffy",
        sgt_coef=0.3,
        luffy_gamma=0.2,
    )
    assert old.exchange.stored == StoredPeerConfig(
        path="runs/peer/trajectories",
        model="llama",
        run="run-1",
        records="step",
        step=7,
        rewards="shuffled",
        skip_damaged_shards=True,
    )
    new = load_config(Config, None, ["exchange.source=stored", *_new_sets()])
    assert old == new


def _new_sets():
    sets = []
    for key, value in OLD_FLAT.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        sets.append(f"{MOVED['exchange.' + key]}={text}")
    return sets


def test_an_override_of_the_flat_shape_loads_and_names_the_new_key():
    with pytest.warns(ConfigDeprecationWarning, match=r"exchange\.weight .* exchange\.ablation"):
        cfg = load_config(Config, None, ["exchange.weight=none"])
    assert cfg.exchange.ablation.weight == "none"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new key loads without a word
        assert load_config(Config, None, ["exchange.ablation.weight=none"]) == cfg


def test_a_key_set_under_both_names_is_refused_naming_both(tmp_path):
    path = _old_yaml(tmp_path, {"store": "a", "stored": {"path": "b"}})
    with pytest.raises(ConfigError, match=r"exchange\.store: set twice.*exchange\.stored\.path"):
        load_config(Config, path)


def test_the_command_line_says_it_in_one_line(tmp_path, capsys):
    assert main(["config", "--set", "exchange.peer_records=same_step"]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "graft: warning: config key exchange.peer_records is deprecated; "
        "it is now exchange.stored.records"
    ]
    assert yaml.safe_load(out)["exchange"]["stored"]["records"] == "same_step"


def test_a_run_recorded_in_the_flat_shape_reads_as_today(tmp_path):
    """A run's config.yaml of an earlier version (`graft compare` reads these) takes today's
    shape silently: the record is read, not a user's config."""
    cfg = load_config(Config, None, ["exchange.source=stored", *_new_sets()])
    today = to_dict(cfg)
    flat = {k: v for k, v in today["exchange"].items() if k not in ("ablation", "stored")}
    flat.update(OLD_FLAT)
    recorded = {**today, "exchange": flat}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert current_shape(recorded) == today


def test_the_command_line_under_an_old_name_wins_over_the_file(capsys):
    """The shipped stored-peer config names exchange.stored.path; `--set exchange.store=DIR` is the
    user's latest word: it takes the file's place, with the one deprecation line. The same key
    twice on the command line, under both names, is refused in one line."""
    config = str(Path(__file__).resolve().parents[1] / "configs" / "graft_stored_tiny.yaml")
    with pytest.warns(ConfigDeprecationWarning, match=r"exchange\.store is deprecated"):
        cfg = load_config(Config, config, ["exchange.store=elsewhere/trajectories"])
    assert cfg.exchange.stored.path == "elsewhere/trajectories"
    assert main(["config", config, "--set", "exchange.store=elsewhere/trajectories"]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "graft: warning: config key exchange.store is deprecated; it is now exchange.stored.path"
    ]
    assert yaml.safe_load(out)["exchange"]["stored"]["path"] == "elsewhere/trajectories"
    both = ["exchange.store=a", "exchange.stored.path=b"]
    with (
        pytest.raises(ConfigError, match=r"set twice, as exchange\.store and as exchange\.stored"),
        pytest.warns(ConfigDeprecationWarning),
    ):
        load_config(Config, config, both)
    assert main(["config", config, *(x for s in both for x in ("--set", s))]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("graft: error: --set exchange.store and --set exchange.stored.path")
