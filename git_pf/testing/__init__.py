"""git_pf.testing: the offline fake LLM server, the scripted and demo agents and the demo drivers,
which `make demo`, `git pf blame --validate` and the tests use. No other package imports it
(except the blame validation suite)."""
