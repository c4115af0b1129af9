"""Infrastructure under every feature: pools, the embedded Postgres, migrations, locks and fences, the checkpointer.

Also the one home of statements on LangGraph's tables (`langgraph_*.py`) and the
service's one reader of what the saver wrote (`checkpoints.py`).
"""
