"""Agent frameworks saving themselves as images: each integration turns a framework's own
checkpoints or events into images (LangGraph's checkpointer, Claude Code's hooks, the OpenAI
Agents SDK's run hooks). An operations-layer package: it may import anything below the CLI,
and each module imports its framework lazily (an extra), so importing the package needs none
of them; nothing but the CLI imports it."""
