"""Threads and their runs over HTTP: starting, streaming, rejoining and cancelling runs, transcripts and records.

A run is one graph execution under the thread's lock (`runs.py`); the transcript and the
record are read back from the checkpoints (`db/checkpoints.py`).
"""
