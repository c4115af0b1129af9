"""Budgets: an operator's cap on model spending per tenant and per user, checked before every model call."""
