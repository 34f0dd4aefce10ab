"""runplane's load benchmarks: ``python -m bench all --quick`` (see docs/benchmarks.md)."""
