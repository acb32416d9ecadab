"""The older of the two start files earlier releases installed; as ``claude_code_hook_main.py``."""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "claude_code_hook_main.py"),
                   run_name="__main__")
