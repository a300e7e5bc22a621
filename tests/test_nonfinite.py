"""A minibatch whose loss or gradient norm is NaN or infinite never reaches the optimizer:
`algo.nonfinite=stop` ends the update there, `skip` goes on with the next minibatch; both count
the step in `optim/nonfinite_steps` (the trainer turns `stop` into a one-line error)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graft.config import AlgoConfig, Config, ConfigError, load_config
from graft.training.update import UpdateSettings, train_on_batch
from graft.types import TrainGroup
from test_update import _sequences


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_a_nan_minibatch_never_reaches_the_optimizer(random_lm, mode):
    seqs = _sequences(random_lm, 4)
    nan = [dataclasses.replace(q, advantage=float("nan")) for q in seqs[:2]]  # NaN loss and grads
    groups = [TrainGroup("bad", tuple(nan)), TrainGroup("good", tuple(seqs[2:]))]
    before = [p.detach().clone() for p in random_lm.parameters()]
    opt = torch.optim.AdamW(random_lm.parameters(), lr=1e-2)
    s = UpdateSettings(algo=AlgoConfig(minibatches=2, micro_batch_size=2, nonfinite=mode))
    stats = train_on_batch(random_lm, opt, groups, s, pad_id=0)
    after = list(random_lm.parameters())
    assert all(bool(torch.isfinite(p).all()) for p in after)
    assert stats["optim/nonfinite_steps"] == 1.0
    moved = any(not torch.equal(a, b) for a, b in zip(after, before))
    if mode == "stop":  # the NaN minibatch came first: no step at all
        assert stats["optim/steps"] == 0.0 and not moved
    else:  # the good minibatch still trains
        assert stats["optim/steps"] == 1.0 and moved and stats["grad_norm"] > 0


def test_the_option_defaults_to_stop_and_is_checked():
    assert AlgoConfig().nonfinite == "stop" == UpdateSettings().algo.nonfinite
    s = UpdateSettings.from_config(
        AlgoConfig(nonfinite="skip"), Config().rollout, Config().models[0].optim
    )
    assert s.algo.nonfinite == "skip"
    with pytest.raises(ConfigError, match=r"^algo\.nonfinite: must be one of"):
        load_config(Config, None, ["algo.nonfinite=ignore"])


def test_finite_updates_report_no_count_unless_skipping(random_lm):
    seqs = _sequences(random_lm, 4)
    opt = torch.optim.AdamW(random_lm.parameters(), lr=1e-3)
    stats = train_on_batch(
        random_lm, opt, [TrainGroup("q", tuple(seqs))], UpdateSettings(), pad_id=0
    )
    assert "optim/nonfinite_steps" not in stats  # the default's metrics are as they were
    skip = UpdateSettings(algo=AlgoConfig(nonfinite="skip"))
    stats = train_on_batch(random_lm, opt, [TrainGroup("q", tuple(seqs))], skip, pad_id=0)
    assert stats["optim/nonfinite_steps"] == 0.0
