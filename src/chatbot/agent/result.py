"""What one run of the graph gave its caller, as one type: `RunResult`.

The graph's nodes fill it in as the run goes (the run context carries it, `Context.result`;
nothing of it is persisted: the retrieved chunks' text stays out of every checkpoint), and
`agent/run.py` returns it once the graph is over. The run service (threads/runs.py) and the
evaluation's dry run read a run through it, never through the graph's node names or state
keys. A new kind of thing a run gives its caller is a new field here.

`failure_of` is the one mapping from what a run's graph raised to the reason it failed
(chatbot/failures.py words the reasons).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chatbot.agent.modelcall import ModelFailure
from chatbot.agent.outcome import GraphOutcome
from chatbot.db.locks import LeaseLost
from chatbot.errors import DATABASE_ERRORS
from chatbot.failures import Failure, FailureReason
from chatbot.memory.extraction import MemoryCandidates
from chatbot.recall.service import RecalledTurn
from chatbot.responses import ModelCallUsage, QuotedChunk

# What a run's graph may raise, and the reason each means; anything else is `internal`.
# A lost lock session is a dropped database connection: the run cannot write.
_RAISED: tuple[tuple[type[BaseException], FailureReason], ...] = (
    (TimeoutError, "model_timeout"),
    (LeaseLost, "database"),
    *((error, "database") for error in DATABASE_ERRORS),
)


def failure_of(exc: BaseException) -> Failure:
    """Return why a run whose graph raised `exc` failed."""
    if isinstance(exc, ModelFailure):
        return Failure(exc.reason, exc.retry_after)
    return next((Failure(reason) for kind, reason in _RAISED if isinstance(exc, kind)), Failure("internal"))


def failure_named(class_name: str) -> Failure:
    """Return why a run failed from the class name of what its graph raised (a stored `__error__` write)."""
    return next((Failure(reason) for kind, reason in _RAISED if kind.__name__ == class_name), Failure("internal"))


@dataclass(eq=False, kw_only=True)
class RunResult:
    """How a run of the graph ended and what it used on the way."""

    outcome: GraphOutcome | None = None
    """The answer node's outcome (agent/outcome.py); None when the graph raised before it."""
    raised: BaseException | None = None
    """What the graph raised, if it did (a cancellation included: the caller decides)."""
    model_failure: ModelFailure | None = None
    """The model's failure the graph recorded as an `error` outcome (the run did not raise)."""
    usage: list[ModelCallUsage] = field(default_factory=list)
    """The run's model calls so far, in order (the summary fold's, then the answer's)."""
    chunks: list[QuotedChunk] = field(default_factory=list)
    """What `retrieve` found, text included, in rank order."""
    memory_candidates: MemoryCandidates | None = None
    """What the offline rules found in the user's message for memory (offline answers only)."""
    recalled: tuple[RecalledTurn, ...] = ()
    """The thread's earlier turns recall gave the model, in the order given (agent/_recall.py);
    the run record names them by id."""

    @property
    def failure(self) -> Failure | None:
        """Return why the run failed; None when it gave an answer."""
        if self.raised is not None:
            return failure_of(self.raised)
        if self.outcome is None:
            return Failure("internal")
        return self.outcome.failure

    @property
    def shown(self) -> str:
        """Return what the user was shown of an answer the model failed to finish."""
        return self.model_failure.shown if self.model_failure is not None else ""

    @property
    def error(self) -> BaseException | None:
        """Return the exception behind a failed run, for its log line: raised, or the model's."""
        return self.raised if self.raised is not None else self.model_failure
