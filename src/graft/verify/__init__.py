"""Verification, along the data flow: a response and its problem's gold in, a verdict out. The
math grader (`math/`), the code verifier (`code/`, its programs run in `graft.sandbox` beside
it), the registry of verifiers by name (`registry.py`), the verifier pool that runs them in
processes of their own with deadlines (`pool.py`, its workers `pool_worker.py`, on Ray
`pool_ray.py`), the scoring of rollouts (`scoring.py`) and the check of a problem set's golds
(`golds.py`). Problem sources stay in `graft.tasks`."""
