"""The effects layer: the hash-chained, append-only ledger ``effects/ledger.jsonl`` of tool
calls with side effects (``ledger``) and its merge (``merge``). Imports as ``git_pf.layers``
says (docs/architecture.md).
"""
