"""`make bench`: the budgets of docs/architecture.md §7, each reported as a ratio against a floor or a peer.

Layout:
* `bench/measure.py` — shared helpers: timed samples (interleaved A/B pairs, GC before each
  sample, warm-up, calibrated inner loops), summary statistics, the `Report`/`Budget` types and
  the table printer.
* one module per benchmark suite, each with `TITLE` and `run(quick: bool) -> Report`:
  `bench/nodeset_sync.py` (sync latency vs the JSON floor), `bench/http_p99.py` (p99 over HTTP on
  one gunicorn worker vs `/healthz`). A new suite (e.g. slurm_sync's poll cycle, issue 5) is a new
  module plus one line in `bench.run.SUITES`.
* `bench/run.py` — the runner: runs the suites, prints their tables, exits 1 if a budget is
  violated (and says which). Budgets live here only, never in pytest: machines are noisy.
"""
