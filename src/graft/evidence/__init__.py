"""Evidence: whether a method helps, answered with paired intervals over seeds, never one run.

`compare` groups finished runs by method and seed and computes, for every evaluated metric, each
method's per-seed difference against the baseline (`stats`: Student t intervals, pure);
`regime` reads from a run's exchange counts where the gate finds candidates and how much the
weight admits; `compare_report` writes compare.md, compare.json and compare.png. `demo` is the
built-in experiment (`graft demo`): the tiny complementary pair, its regimes and methods, run
resumably; `demo_report` measures complementarity and writes results.json, `demo_text` results.md
and `demo_plot` curves.png.
"""
