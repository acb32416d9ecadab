"""git_pf.integrations.claude_code: Claude Code sessions as image branches: install (`settings`),
the hook client (`hook`), its per-repository server (`server`), what an event writes (`session`),
the ledger classes (`effects`) and rewind (`rewind`). Importing it imports nothing heavy."""
