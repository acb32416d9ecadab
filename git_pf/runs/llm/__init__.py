"""git_pf.runs.llm: the LLM API wire formats (OpenAI chat and responses, Anthropic messages)
that the proxy, replay, blame and the report read and write."""
