"""The `chatbot` command line: serving, migrations, the dev stack, chat, evaluation, replays and operations.

A composition layer: each command builds what it needs from the settings and calls the
features' services, never their SQL.
"""
