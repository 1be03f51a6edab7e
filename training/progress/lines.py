"""LineProgress: training progress recognised in the lines a task prints. Stdlib only, never raises.

`LineProgress(pattern=None, builtin=True).feed(line, t)` reads one line (one `\\n`- or `\\r`-separated
segment of a task's log; see training/progress/tailer.py) printed at time `t` and returns a
`ProgressSample` when the line said something about progress, else None. The sample is what a `progress`
event carries (DESIGN.md): `local_step` (cumulative for this process), `global_step`, `examples`
(cumulative, None while unknown) and `loss`, plus `steps_per_s` (printed, or derived from step deltas
over time) for diagnostics.

Recognised (built-in, on by default; what TensorFlow's own tools print, with or without a logging
prefix such as `INFO:tensorflow:` or absl's `I1203 12:00:00.123 123 file.py:263] `):
- `global_step/sec: 239.793`      tf.compat.v1.train.StepCounterHook (MonitoredTrainingSession's
                                   `log_step_count_steps`, Estimator): a rate, no step;
- `loss = 0.0179, step = 101 (0.280 sec)`  tf.compat.v1.train.LoggingTensorHook({"loss": ..,
                                   "step": global_step}) (what Estimator installed): a global step;
- Keras 3 `Model.fit` progress, `Epoch 2/3` and ` 11/100 ━━━ 0s 5ms/step - loss: 0.1764 - ...`
  (verbose=1, one `\\r` update per 0.05 s) or `100/100 - 1s - 6ms/step - loss: 0.1633 - ...`
  (verbose=2, one line per epoch): a step within the epoch, made cumulative across epochs.
A user pattern (`[training] progress_pattern`) is a Python regex searched in every line (ANSI colour
codes removed) with named groups among KNOWN_GROUPS; it is tried first, the built-ins after.

Derivation: a printed `step` (or Keras' step within the epoch) is this process's count; when it goes
back (a new epoch, a new loop) the previous count is carried over, so `local_step` only grows. With only a
`global_step` printed, `local_step` grows by the global step's advance (exact with one worker; with
several asynchronous workers each one sees the cluster's advance). With only a rate printed,
`local_step` is the rate integrated over time. `examples` sums per-line `examples`, or integrates
`examples_per_s`. `global_step` is the last one printed, else `local_step`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

KNOWN_GROUPS = ("step", "global_step", "loss", "examples", "examples_per_s", "steps_per_s")
MAX_LINE = 4096  # longer lines are read as their first and last MAX_LINE / 2 characters

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# python logging's default format (`INFO:tensorflow:`) and absl's (`I1203 07:53:31.121690 1398 file.py:265] `)
_PREFIX = re.compile(r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:)?"
                     r"(?:[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\s\]]+:\d+\] )?")
_STEP_COUNTER = re.compile(rf"(?:^|\W)global_step/sec: (?P<steps_per_s>{_NUM})")
_LOGGING_TENSOR = re.compile(rf"(?:^|\W)loss = (?P<loss>{_NUM}), step = (?P<global_step>\d+)\b")
_KERAS_EPOCH = re.compile(r"Epoch (?P<epoch>\d+)/(?P<epochs>\d+)\s*$")
_KERAS_BAR = re.compile(r"\s*(?P<step>\d+)/(?:\d+|Unknown)\s.*?\d+(?:\.\d+)?(?:s|ms|us)/step\b")
_KERAS_LOSS = re.compile(rf" - loss: (?P<loss>{_NUM})")


class ProgressSample(NamedTuple):
    local_step: int
    global_step: int
    examples: int | None
    loss: float | None
    steps_per_s: float | None  # printed, or from the last two step changes; for diagnostics


def pattern_error(pattern: str) -> str | None:
    """None when `pattern` is a usable progress_pattern, else a one-line reason (for config validation)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"not a valid Python regular expression: {exc}"
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        return f"not a valid Python regular expression: {exc}"
    names = set(compiled.groupindex)
    if not names:
        return f"has no named group; name at least one of {', '.join(KNOWN_GROUPS)}, e.g. (?P<step>\\d+)"
    unknown = sorted(names - set(KNOWN_GROUPS))
    if unknown:
        return f"unknown group name(s) {', '.join(unknown)}; the known ones are {', '.join(KNOWN_GROUPS)}"
    return None


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled progress_pattern; ValueError (with pattern_error's text) when it is not usable."""
    error = pattern_error(pattern)
    if error is not None:
        raise ValueError(f"progress_pattern {pattern!r}: {error}")
    return re.compile(pattern)


def clean(line: str) -> str:
    """A log segment as a terminal would show it: capped, without ANSI codes, backspaces, edge blanks."""
    if len(line) > MAX_LINE:
        line = f"{line[:MAX_LINE // 2]} {line[-MAX_LINE // 2:]}"
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\b" in line:
        line = line.replace("\b", "")
    return line.strip()


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


class LineProgress:
    """The state machine turning a task's printed lines into ProgressSamples (see the module docstring)."""

    def __init__(self, pattern: str | re.Pattern[str] | None = None, builtin: bool = True) -> None:
        self.pattern = compile_pattern(pattern) if isinstance(pattern, str) else pattern
        self.builtin = builtin
        self.reset()

    def reset(self) -> None:
        """Forget everything: a new process counts from zero."""
        self.local = 0.0  # float: a rate integrated over time adds fractions
        self.global_step: int | None = None
        self.examples: float | None = None
        self.loss: float | None = None
        self.steps_per_s: float | None = None
        self._printed_step: int | None = None  # the last step (or Keras step within an epoch) printed
        self._step_base = 0  # counts carried over from earlier epochs / loops
        self._counted = False  # a step or global step was printed: rates are not integrated any more
        self._t_rate: float | None = None
        self._t_examples_rate: float | None = None
        self._rate_mark: tuple[float, float] | None = None  # (t, local) when local last changed

    def feed(self, line: str, t: float) -> ProgressSample | None:
        try:
            return self._feed(line, t)
        except Exception:
            return None

    # -- recognising ----------------------------------------------------------------------------------

    def _feed(self, line: str, t: float) -> ProgressSample | None:
        text = clean(line)
        if not text:
            return None
        fields = self._user(text) if self.pattern is not None else None
        if fields is None and self.builtin:
            fields = self._builtin(text)
        if fields is None:
            return None
        return self._apply(fields, t)

    def _user(self, text: str) -> dict[str, float] | None:
        assert self.pattern is not None
        m = self.pattern.search(text)
        if m is None:
            return None
        fields = {}
        for name, value in m.groupdict().items():
            number = _number(value)
            if number is not None:
                fields[name] = number
        return fields or None

    def _builtin(self, text: str) -> dict[str, float] | None:
        if "/sec: " in text:
            m = _STEP_COUNTER.search(text)
            if m:
                rate = _number(m.group("steps_per_s"))
                return {"steps_per_s": rate} if rate is not None else None
        if "loss = " in text:
            m = _LOGGING_TENSOR.search(text)
            if m:
                loss = _number(m.group("loss"))
                fields = {"global_step": float(m.group("global_step"))}
                if loss is not None:
                    fields["loss"] = loss
                return fields
        if "/step" in text or "Epoch " in text:
            return self._keras(_PREFIX.match(text).end(), text)  # type: ignore[union-attr]  # always matches
        return None

    def _keras(self, start: int, text: str) -> dict[str, float] | None:
        body = text[start:]
        if body.startswith("Epoch "):
            if _KERAS_EPOCH.match(body):
                self._new_count()
            return None
        m = _KERAS_BAR.match(body)
        if m is None:
            return None
        loss = _KERAS_LOSS.search(body, m.end())
        if loss is None:
            return None  # predict()'s bar: no loss, no training
        fields = {"step": float(m.group("step"))}
        value = _number(loss.group("loss"))
        if value is not None:
            fields["loss"] = value
        return fields

    # -- deriving -------------------------------------------------------------------------------------

    def _new_count(self) -> None:
        """The printed step starts again from 0 (Keras: a new epoch): keep what was counted so far."""
        if self._printed_step is not None:
            self._step_base += self._printed_step
            self._printed_step = 0

    def _apply(self, f: dict[str, float], t: float) -> ProgressSample:
        before = self.local
        rate = f.get("steps_per_s")
        if "step" in f:
            step = int(f["step"])
            if self._printed_step is not None and step < self._printed_step:
                self._new_count()
            self._printed_step = step
            self.local = max(self.local, float(self._step_base + step))
            self._counted = True
        if "global_step" in f:
            gstep = int(f["global_step"])
            if "step" not in f and self.global_step is not None and gstep > self.global_step:
                self.local += gstep - self.global_step
            self.global_step = gstep
            self._counted = True
        if rate is not None and not self._counted and self._t_rate is not None and t > self._t_rate:
            self.local += rate * (t - self._t_rate)
        if rate is not None:
            self._t_rate = t
        self._count_examples(f, t)
        if "loss" in f:
            self.loss = f["loss"]
        self._update_rate(before, rate, t, counted="step" in f or "global_step" in f)
        return ProgressSample(
            local_step=int(self.local),
            global_step=self.global_step if self.global_step is not None else int(self.local),
            examples=None if self.examples is None else int(self.examples),
            loss=self.loss, steps_per_s=self.steps_per_s,
        )

    def _count_examples(self, f: dict[str, float], t: float) -> None:
        if "examples" in f:
            self.examples = (self.examples or 0.0) + max(f["examples"], 0.0)
        elif "examples_per_s" in f:
            if self._t_examples_rate is not None and t > self._t_examples_rate:
                self.examples = (self.examples or 0.0) + max(f["examples_per_s"], 0.0) * (t - self._t_examples_rate)
            elif self.examples is None:
                self.examples = 0.0
            self._t_examples_rate = t

    def _update_rate(self, before: float, printed: float | None, t: float, counted: bool) -> None:
        if printed is not None:
            self.steps_per_s = printed
        mark = self._rate_mark
        if self.local == before and not (counted and mark is None):
            return
        if printed is None and mark is not None and t > mark[0]:
            self.steps_per_s = (self.local - mark[1]) / (t - mark[0])
        self._rate_mark = (t, self.local)
