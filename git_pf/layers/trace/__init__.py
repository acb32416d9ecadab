"""The trace layer: ``trace/messages.jsonl`` (``messages``) and the recorded LLM exchanges
under ``trace/tape/`` (``tape``), their merge (``merge``, with the summary of the other branch
in ``summary``). Imports as ``git_pf.layers`` says (docs/architecture.md).
"""
