"""The soak: mixed traffic on real replicas, and a checker of what the clients were acknowledged.

`ledger.py` keeps what every client was told, `traffic.py` drives the virtual users,
`tally.py` counts every HTTP answer by kind and status, `rss.py` samples the replicas'
resident memory. `tests/hardening/test_soak.py` runs it (`make test` briefly, `make soak`
for ten minutes).
"""
