"""The library's operations in pyperf: `python bench_pyperf.py --fast -o pyperf.json`
writes the file the bench step reads (format "pyperf")."""

import pyperf

import work

runner = pyperf.Runner()
runner.bench_func("parse", work.parse)
runner.bench_func("render", work.render)
runner.bench_func("checksum", work.checksum)
