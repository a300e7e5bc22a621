"""Peer logs: every trajectory store graft writes, and how. A run's rollouts (`recorder`), a
frozen sampling of a model (`sample`, `graft sample`) and another tool's logged responses
(`log_import`, `graft store import`) are each verified, grouped with their advantages and written
with their provenance through one writer (`writer`): `verified_groups` is verify-then-group for
those three and the stored peer that reads such a log back; `provenance` is the one place a
policy's `Provenance` is built; `LogWriter` writes a step's groups of a model as rows."""
