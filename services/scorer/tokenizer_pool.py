"""A few copies of the tokenizer, leased one per call, so one big request never holds up the rest.

A fast tokenizer must not be used by two threads at once (its Rust core refuses a second borrow),
and one shared copy under a lock made every call wait behind the largest. The copies (about 30 MB
and 0.6 s of held GIL each for Qwen's vocabulary) are made by `warm()` in the background at start,
not while calls wait: made on demand they stalled every call in the process for over a second
(measured). A call waits only when all of them are busy.

    with pool.lease() as tokenizer:
        ids = tokenizer(texts)["input_ids"]
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class TokenizerPool:
    def __init__(self, tokenizer: Any, size: int = 4) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.original, self.size = tokenizer, size
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle.put(tokenizer)
        self._made = 1
        self._lock = threading.Lock()

    def warm(self) -> threading.Thread:
        """Make the remaining copies in a background thread."""

        def fill() -> None:
            while True:
                with self._lock:
                    if self._made >= self.size:
                        return
                    self._made += 1
                self._idle.put(copy.deepcopy(self.original))

        thread = threading.Thread(target=fill, name="tokenizer-pool-warm", daemon=True)
        thread.start()
        return thread

    @contextmanager
    def lease(self) -> Iterator[Any]:
        tokenizer = self._take()
        try:
            yield tokenizer
        finally:
            self._idle.put(tokenizer)

    def _take(self) -> Any:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            grow = self._made < self.size
            if grow:
                self._made += 1
        return copy.deepcopy(self.original) if grow else self._idle.get()
