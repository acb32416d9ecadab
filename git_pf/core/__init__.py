"""git_pf.core: pure helpers every other package may use: canonical JSON, JSONL, read limits,
units, liveness, write-back, config, secret detection, error classes. Imports nothing else of git-pf."""
