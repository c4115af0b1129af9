"""`chatbot eval`: run labelled cases, or rated runs again, through a dry copy of the graph.

Each case goes through the whole graph (memory read, retrieval against the tenant's
knowledge base, window, model, status) once per candidate model. The graph is dry: an
in-memory checkpointer, an in-memory store, a memory sink that drops jobs, no system
prompt registry and no usage totals, so the service's tables are only read.
"""
