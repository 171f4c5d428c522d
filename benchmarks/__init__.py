"""leaseguard's benchmarks: `make bench` runs `python -m benchmarks.run` (see README.md)."""
