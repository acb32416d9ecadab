"""The file the installed Claude Code hook command runs: ``python -S <this file> hook claude-code``.

Python compiles a script it runs as ``__main__`` from source at every start (no cached
bytecode): 4-8 ms a call for all of ``hook``. So this file stays this small: it
puts git_pf's parent first on ``sys.path`` and hands over to ``hook.main``, which
loads from its cached bytecode. Writes nothing.
"""
import os
import sys

if __name__ == "__main__":
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # git_pf's parent
    from git_pf.integrations.claude_code.hook import main

    sys.exit(main())
