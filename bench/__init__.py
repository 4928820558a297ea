"""`make bench`: the budgets of docs/architecture.md §7, each reported as a ratio against a floor or a peer.

Layout:
* `bench/measure.py` — shared helpers: timed samples (interleaved A/B pairs, GC before each
  sample, warm-up, calibrated inner loops), summary statistics, paired ratios, the `Report`/`Budget`
  types and the table printer.
* one module per benchmark suite, each with `TITLE` and `run(quick: bool) -> Report`:
  `bench/nodeset_sync.py` (NodeSet sync vs the JSON floor, in process), `bench/http_p99.py` (NodeSet sync
  over HTTP under gunicorn vs a floor app, with wrk), `bench/slurm_sync.py` (writes and cost of a
  slurm_sync pass), `bench/bridge.py` (bridge scheduling cost with few and many Slurm jobs), `bench/idle.py`
  (requests a minute and memory of slurm_sync and the hook server at idle, on real labs). A new suite
  is a new module plus one line in `bench.run.SUITES`.
* `bench/run.py` — the runner: runs the suites, prints their tables, one summary table of every
  budget and one verdict line per suite; exits 1 if a budget is missed, 2 if a suite could not run (a
  bench bug or a broken machine: a loaded one must not do it). Budgets live here only, never in
  pytest: machines are noisy.
* `bench/apistatus.py` — the `metav1.Status` answers of the fake API servers, shaped as a real one's.
"""
