"""The tenant's knowledge base: ingesting Markdown into versioned chunks and searching them for a question.

The graph's retriever (`retriever.py`) is what a run sees; chunk versions that a kept run
record cites stay until nothing cites them.
"""
