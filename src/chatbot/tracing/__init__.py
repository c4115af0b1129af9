"""Tracing of runs with OpenTelemetry: off unless `CHATBOT_TRACING` names an exporter.

A traced run is one span, with a child span per graph node and a grandchild per chat-model
call (tracing/_spans.py). Spans carry ids, statuses, model names, error classes and their
own timings, never text: not the message, the answer, memory values or chunk text.

The OpenTelemetry packages are an optional extra (`pip install 'chatbot[tracing]'`). This
module imports none of them: with tracing off a run pays two no-op calls and nothing of
the SDK is loaded, so a replica without the extra runs exactly as before.
"""
