"""The local executor: ``jobs`` threads of this process (what ``--jobs N`` means)."""
from __future__ import annotations

from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from ..core.errors import UsageError


class LocalExecutor:
    name = "local"
    remote = False

    def __init__(self, jobs: int = 1):
        if not isinstance(jobs, int) or jobs < 1:
            raise UsageError(f"--jobs must be 1 or more, not {jobs}")
        self.jobs = jobs

    def start(self) -> None:
        pass

    def width(self) -> int:
        return self.jobs

    def map(self, fn, items, on_result=None, on_error=None) -> list:
        items = list(items)
        out: list = [None] * len(items)
        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="pf-job") as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            todo = set(futures)
            try:
                while todo:
                    done, todo = wait(todo, return_when=FIRST_EXCEPTION)
                    for f in sorted(done, key=futures.get):
                        out[futures[f]] = f.result()  # raises the task's own exception
                        if on_result is not None:
                            on_result(out[futures[f]])
            except BaseException as e:
                if on_error is not None:
                    on_error(e)
                for f in futures:
                    f.cancel()
                raise
        return out
