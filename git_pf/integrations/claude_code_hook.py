"""The start file that hooks installed by earlier releases run (``python -S <this file> hook
claude-code``): the hook client now lives in ``claude_code/``, and ``git pf install --claude-code``
writes commands naming ``claude_code/hook_main.py`` (and replaces these). Kept so that a project
installed before keeps working after an upgrade: a missing file would make each hook exit 2,
which Claude Code takes as "block" for some events. Writes nothing.
"""
import os
import sys

if __name__ == "__main__":
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # git_pf's parent
    from git_pf.integrations.claude_code.hook import main

    sys.exit(main())
