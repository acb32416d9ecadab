"""tracefork's localhost record proxy, run with the Python of tracefork's own venv (not imported here):

    python record_tracefork_proxy.py TAPE PORT UPSTREAM

The app and the tape are tracefork's (``tracefork.proxy.build_record_app``, ``tracefork.tape.Tape``),
served by uvicorn as ``tracefork proxy record`` serves them; on SIGINT the tape is saved. tracefork
1.0.0's own command closes its HTTP client on an event loop that is already closed when it stops and
dies before it saves the tape, once it has forwarded a request; this does what it would do otherwise.

Benchmark helper only: it writes TAPE and listens on 127.0.0.1:PORT.
"""
import sys

import uvicorn
from tracefork.proxy import build_record_app
from tracefork.tape import Tape

if __name__ == "__main__":
    tape_path, port, upstream = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    tape = Tape()
    uvicorn.run(build_record_app(tape, upstream), host="127.0.0.1", port=port, workers=1, log_level="warning")
    tape.save(tape_path)
    print(f"saved {len(tape.exchanges)} exchanges", flush=True)
