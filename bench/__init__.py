"""semula's benchmarks (issue 3): replay hits against WireMock and a bare Flask route, and held calls.

Run with `make bench` (all) or `python -m bench replay` / `python -m bench hold`. Not part of `make test`.
"""
