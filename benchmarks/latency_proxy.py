"""A TCP proxy that adds network latency; now :mod:`phalanx.bench.latency_proxy`.

python benchmarks/latency_proxy.py LISTEN_PORT UPSTREAM_PORT ONE_WAY_DELAY_MS
"""

from phalanx.bench.latency_proxy import main

if __name__ == "__main__":
    main()
