"""Configuration: what a run is, checked before anything runs.

A run is described by nested frozen dataclasses (`schema`, its `task.*` sections in `task_schema`:
one docstring per field, which `graft config --docs` prints), loaded from YAML with dotted
overrides by `lib` (`--set algo.clip_high=0.28 --set models.0.optim.lr=1e-5`). Unknown keys, wrong
types, values a consumer would reject and inconsistent sizes fail before any work, in one line
naming the key: a `Config` validates itself once, when it is made (`checks.validate`). Derived
sizes live in `Plan` (`checks.make_plan`), computed once and never written back into the config.
Defaults follow the GRAFT paper's recipe where it fixes a value (clip 0.2/0.28, token-mean loss, no
KL, AdamW (0.9, 0.999), wd 0.01, grad clip 1.0, temperature 1, top-p 1)."""

from graft.config.checks import Plan, make_plan
from graft.config.lib import ConfigError, load_config, to_dict
from graft.config.schema import (
    AblationConfig,
    AlgoConfig,
    Config,
    EvalConfig,
    ExchangeConfig,
    LoRAConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    SftConfig,
    StoreConfig,
    StoredPeerConfig,
    VerifyConfig,
    ZeroContrastConfig,
)
from graft.config.task_schema import (
    ArithmeticConfig,
    CodeDataConfig,
    ListFunctionsConfig,
    MathDataConfig,
    TaskConfig,
)

__all__ = [
    "AblationConfig",
    "AlgoConfig",
    "ArithmeticConfig",
    "CodeDataConfig",
    "Config",
    "ConfigError",
    "EvalConfig",
    "ExchangeConfig",
    "ListFunctionsConfig",
    "LoRAConfig",
    "MathDataConfig",
    "ModelConfig",
    "OptimConfig",
    "Plan",
    "RolloutConfig",
    "RunConfig",
    "SftConfig",
    "StoreConfig",
    "StoredPeerConfig",
    "TaskConfig",
    "VerifyConfig",
    "ZeroContrastConfig",
    "load_config",
    "make_plan",
    "to_dict",
]
