"""The start file that hooks installed by earlier releases run (``python -S <this file> hook
claude-code``): the hook client now lives in ``claude_code/``, and ``git pf install --claude-code``
writes commands naming ``claude_code/hook_main.py`` (and replaces these). Kept so that a project
installed before keeps working after an upgrade: a missing file would make each hook exit 2,
which Claude Code takes as "block" for some events. Runs ``claude_code/hook_main.py``; writes nothing.
"""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "claude_code", "hook_main.py"),
                   run_name="__main__")
