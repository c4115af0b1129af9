"""The thread and user locks now live in `chatbot.db.locks`; this name stays for its importers."""

from chatbot.db.locks import Fence, Lease, LeaseLost, Locks

__all__ = ["Fence", "Lease", "LeaseLost", "Locks"]
