"""Send one message through the app in a fresh interpreter and print what happened.

`python -m tests.tracing.one_run MODE DATABASE_URL`, MODE one of:
- `no-sdk`: the OpenTelemetry SDK and exporters cannot be imported (a replica without the
  `tracing` extra); tracing is whatever CHATBOT_TRACING says (off unless set);
- `global-provider`: a global SDK tracer provider exporting to memory is installed first
  (as an operator's own OpenTelemetry set-up would), and the spans it got are reported;
- `plain`: nothing special (CHATBOT_TRACING=console prints spans to stdout at shutdown).
The last line is `RESULT <json>`.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import sys
from typing import Any

BLOCKED = ("opentelemetry.sdk", "opentelemetry.exporter")


class _BlockOpenTelemetrySdk(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if any(fullname == name or fullname.startswith(name + ".") for name in BLOCKED):
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by the test)")
        return None


async def main(mode: str, database_url: str) -> dict[str, Any]:
    exporter = None
    if mode == "no-sdk":
        sys.meta_path.insert(0, _BlockOpenTelemetrySdk())
    elif mode == "global-provider":
        from opentelemetry import trace

        from tests.tracing.spans import memory_provider

        provider, exporter = memory_provider()
        trace.set_tracer_provider(provider)

    from tests.fixtures.app import running_app
    from tests.fixtures.sse import parse_sse
    from tests.fixtures.tokens import auth

    async with running_app(database_url) as client:
        response = await client.post(
            f"/v1/threads/one-run-{mode}/runs",
            json={"message": {"content": "What does travel insurance cover for medical costs abroad?"}},
            headers=auth(locale="en-US"),
        )
        events = parse_sse(response.text)
    result: dict[str, Any] = {
        "http_status": response.status_code,
        "last_event": events[-1][0] if events else None,
        "sdk_loaded": sorted(m for m in sys.modules if m.startswith(BLOCKED)),
    }
    if exporter is not None:
        spans = exporter.get_finished_spans()
        result["scopes"] = sorted({s.instrumentation_scope.name for s in spans if s.instrumentation_scope})
        result["span_names"] = sorted({s.name for s in spans})
    return result


if __name__ == "__main__":
    outcome = asyncio.run(main(sys.argv[1], sys.argv[2]))
    print("RESULT " + json.dumps(outcome), flush=True)
