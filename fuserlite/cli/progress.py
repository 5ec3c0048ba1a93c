"""The progress display of `fuserlite run`: shown on a terminal once work takes a while.

    with ProgressDisplay(console) as progress:
        executor = FusionExecutor(fusion, progress=progress)   # passes, then
        executor.run(inputs)                                   # kernels/communications

The pipeline and the executor only call the Progress hook (fuserlite.pipeline);
this module turns the calls into a rich display. Nothing is shown when the
console is not a terminal (output piped or redirected), nor for work that ends
within DELAY_S seconds: a timer starts the display after that delay, so even one
long kernel gets it. The display is transient: it disappears when the work ends.
"""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

DELAY_S = 2.0  # work shorter than this shows nothing


class ProgressDisplay:
    """A fuserlite Progress hook drawing rich progress bars, one per phase."""

    def __init__(self, console: Console | None, delay: float | None = None) -> None:
        """`console` None, or not a terminal: the display stays off."""
        self.enabled = console is not None and console.is_terminal
        self.console = console
        self.delay = DELAY_S if delay is None else delay
        self._lock = threading.Lock()
        self._phases: dict[str, tuple[int | None, int, str]] = {}  # phase -> total, done, now
        self._tasks: dict[str, int] = {}
        self._bars: Progress | None = None
        self._timer: threading.Timer | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.enabled:
            if self.delay <= 0:
                self._show()
            else:
                self._timer = threading.Timer(self.delay, self._show)
                self._timer.daemon = True
                self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._bars is not None:
                self._bars.stop()
            self._bars = None
            self.enabled = False  # a late timer shows nothing

    def __call__(self, phase: str, done: int, total: int | None, current: str) -> None:
        """Record where `phase` is (the fuserlite.pipeline.Progress signature)."""
        if not self.enabled:
            return
        with self._lock:
            self._phases[phase] = (total, done, current)
            if self._bars is not None:
                self._update(phase)

    def phase(self, name: str) -> None:
        """Start a phase of unknown length (random inputs, validation)."""
        self(name, 0, None, "")

    def finish(self, name: str) -> None:
        """End a phase started with `phase`."""
        self(name, 1, 1, "")

    def _show(self) -> None:
        with self._lock:
            if not self.enabled or self._bars is not None:
                return
            self._bars = Progress(
                TextColumn("{task.description:<24}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[current]}"),
                console=self.console,
                transient=True,
            )
            self._bars.start()
            for phase in self._phases:
                self._update(phase)

    def _update(self, phase: str) -> None:
        total, done, current = self._phases[phase]
        assert self._bars is not None
        if phase not in self._tasks:
            self._tasks[phase] = self._bars.add_task(phase, total=total, current="")
        self._bars.update(self._tasks[phase], total=total, completed=done, current=current)
