"""The library's operations in pytest-benchmark: `pytest --benchmark-json=pytest-benchmark.json`
writes the file the bench step reads (format "pytest-benchmark")."""

import work


def test_parse(benchmark):
    benchmark(work.parse)


def test_render(benchmark):
    benchmark(work.render)


def test_checksum(benchmark):
    benchmark(work.checksum)
