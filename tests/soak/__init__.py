"""The soak: mixed traffic on real replicas, and a checker of what the clients were acknowledged.

`ledger.py` keeps what every client was told, `traffic.py` drives the virtual users (saying
`messages.py`'s questions; `wire.py` sends what the typed client never would), `run.py`
runs them and checks every thread at the end, `tally.py` counts every HTTP answer by kind
and status, `rss.py` samples the replicas' resident memory. `tests/hardening/test_soak.py`
runs it (`make test` for 30 s, `make soak` for ten minutes).
"""
