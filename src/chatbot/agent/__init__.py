"""The conversational graph: loading memory, retrieval, the model window and summary, the answer, the run record.

Built once per replica (`graph.py`), driven one run at a time by `run.py`, which returns
the run's `RunResult` (`result.py`). It imports memory, models and retrieval; nothing in
it knows HTTP or the run's thread lock.
"""
