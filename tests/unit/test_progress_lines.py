"""LineProgress on output REALLY printed by TensorFlow 2.21 / Keras 3.15 (tests/unit/data/progress, captured
by tests/fixtures_src/progress/capture.py as the supervisor runs a task), with synthetic timestamps.

Expected values are read from the captured files with independent regexes, never typed in."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest

from training.progress.follow import FileFollower
from training.progress.lines import KNOWN_GROUPS, LineProgress, ProgressSample, compile_pattern, pattern_error

DATA = Path(__file__).parent / "data" / "progress"
NUM = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"


def segments(name: str) -> list[str]:
    """The file's segments exactly as the supervisor's tailer reads them."""
    follower = FileFollower(str(DATA / name), max_read=1 << 30, max_backlog=1 << 30)
    try:
        return follower.read()
    finally:
        follower.close()


def feed_all(segs: list[str], dt: float, lp: LineProgress | None = None) -> list[tuple[float, ProgressSample]]:
    lp = lp or LineProgress()
    out = []
    for i, seg in enumerate(segs):
        t = 1000.0 + i * dt
        sample = lp.feed(seg, t)
        if sample is not None:
            out.append((t, sample))
    return out


def step_changes(samples: list[tuple[float, ProgressSample]]) -> list[tuple[float, ProgressSample]]:
    out: list[tuple[float, ProgressSample]] = []
    for t, s in samples:
        if not out or s.local_step != out[-1][1].local_step:
            out.append((t, s))
    return out


@pytest.mark.parametrize("name", ["tf1_hooks_tflogger.log", "tf1_hooks_absl.log"])
def test_logging_tensor_hook_loss_and_global_step(name: str) -> None:
    text = (DATA / name).read_text(encoding="utf-8")
    printed = [(float(loss), int(step)) for loss, step in re.findall(rf"loss = ({NUM}), step = (\d+)", text)]
    assert len(printed) >= 5, "the fixture must hold LoggingTensorHook lines"
    samples = feed_all(segments(name), dt=0.5)
    last = samples[-1][1]
    assert last.loss == printed[-1][0]
    assert last.global_step == printed[-1][1]
    # the absl file prints every line twice (TF's logger and absl's): steps must not be counted twice
    assert last.local_step == printed[-1][1] - printed[0][1]
    assert [s.global_step for _, s in step_changes(samples)] == sorted({step for _, step in printed})
    (t0, s0), (t1, s1) = step_changes(samples)[-2:]
    assert last.steps_per_s == pytest.approx((s1.local_step - s0.local_step) / (t1 - t0))


def test_step_counter_hook_rate_alone_is_integrated_over_time() -> None:
    """Only StepCounterHook's `global_step/sec` lines (e.g. MonitoredTrainingSession without a
    LoggingTensorHook): no step is printed, so local_step is the printed rate integrated over time."""
    segs = [s for s in segments("tf1_hooks_tflogger.log") if "global_step/sec" in s]
    rates = [float(r) for r in re.findall(rf"global_step/sec: ({NUM})", "\n".join(segs))]
    assert len(rates) >= 3
    samples = feed_all(segs, dt=2.0)
    last = samples[-1][1]
    assert last.steps_per_s == rates[-1]
    assert last.local_step == int(sum(rate * 2.0 for rate in rates[1:]))  # the first line sets the clock
    assert last.global_step == last.local_step
    assert last.loss is None and last.examples is None


def test_keras_fit_verbose2_epoch_lines_count_across_epochs() -> None:
    text = (DATA / "keras_fit_verbose2.log").read_text(encoding="utf-8")
    epochs = re.findall(r"^Epoch (\d+)/(\d+)$", text, re.M)
    per_epoch = [int(n) for n in re.findall(r"^(\d+)/\1 - ", text, re.M)]
    losses = [float(x) for x in re.findall(rf" - loss: ({NUM})", text)]
    assert len(epochs) == int(epochs[-1][1]) == len(per_epoch) == 3
    samples = feed_all(segments("keras_fit_verbose2.log"), dt=1.0)
    assert [s.local_step for _, s in samples] == [sum(per_epoch[:i + 1]) for i in range(len(per_epoch))]
    assert [s.loss for _, s in samples] == losses
    assert samples[-1][1].global_step == sum(per_epoch)
    (t0, _s0), (t1, s1) = samples[-2:]
    assert s1.steps_per_s == pytest.approx(per_epoch[-1] / (t1 - t0))


def test_keras_fit_verbose1_carriage_return_updates() -> None:
    """Keras 3 writes its bar with `\\b...\\r` updates even into a file (any POSIX stdout counts as a
    dynamic display); each update is one segment."""
    raw = (DATA / "keras_fit_verbose1.log").read_bytes()
    assert b"\r" in raw and b"\x1b[" in raw, "the fixture must hold the real bar updates"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", raw.decode("utf-8")).replace("\b", "")
    # the cumulative step for every bar update, computed from the text alone
    expected: list[tuple[int, float]] = []
    base = last_within = 0
    for part in re.split(r"[\r\n]", plain):
        if re.match(r"Epoch \d+/\d+$", part.strip()):
            base, last_within = base + last_within, 0
        m = re.match(rf"\s*(\d+)/\d+ .*ms/step - loss: ({NUM})", part)
        if m:
            last_within = int(m.group(1))
            expected.append((base + last_within, float(m.group(2))))
    assert len(expected) > 20
    samples = feed_all(segments("keras_fit_verbose1.log"), dt=0.05)
    assert [(s.local_step, s.loss) for _, s in samples] == expected
    assert samples[-1][1].local_step == 300 == samples[-1][1].global_step
    changes = step_changes(samples)
    (t0, s0), (t1, s1) = changes[-2:]
    assert s1.steps_per_s == pytest.approx((s1.local_step - s0.local_step) / (t1 - t0))
    assert all(b[1].local_step > a[1].local_step for a, b in itertools.pairwise(changes))


def test_keras_evaluate_after_fit_counts_on_and_predict_does_not() -> None:
    lp = LineProgress()
    lp.feed("100/100 - 1s - 6ms/step - loss: 0.1633 - mae: 0.3074", 1.0)  # fit, epochs=1: no Epoch line
    s = lp.feed("10/10 - 0s - 2ms/step - loss: 0.2 - mae: 0.3", 2.0)  # evaluate's bar starts again
    assert s is not None and s.local_step == 110
    assert lp.feed("1/1 - 0s - 20ms/step", 3.0) is None  # predict: no loss, no training


def test_user_pattern_groups() -> None:
    lp = LineProgress(r"it (?P<step>\d+) .*?lr \S+ .*?loss=(?P<loss>\S+) ex=(?P<examples>\d+)")
    assert lp.feed("it 10 lr 0.1 loss=2.5 ex=64", 10.0) == ProgressSample(10, 10, 64, 2.5, None)
    s = lp.feed("it 30 lr 0.1 loss=2.0 ex=64", 12.0)
    assert s == ProgressSample(30, 30, 128, 2.0, 10.0)
    lp = LineProgress(r"gs=(?P<global_step>\d+) (?P<examples_per_s>[\d.]+) ex/s")
    lp.feed("gs=500 100 ex/s", 1.0)
    s = lp.feed("gs=700 100 ex/s", 3.0)
    assert s is not None and (s.local_step, s.global_step, s.examples, s.steps_per_s) == (200, 700, 200, 100.0)
    # a user pattern goes first; the built-ins still read the lines it does not match
    lp = LineProgress(r"mystep (?P<step>\d+)")
    assert lp.feed("INFO:tensorflow:loss = 0.5, step = 7", 1.0) is not None


def test_printed_step_going_back_keeps_counting() -> None:
    lp = LineProgress(r"batch (?P<step>\d+)")
    for i, n in enumerate([10, 20, 5, 15]):
        s = lp.feed(f"batch {n}", float(i))
    assert s is not None and s.local_step == 35


def test_builtin_off_reads_only_the_user_pattern() -> None:
    lp = LineProgress(None, builtin=False)
    assert lp.feed("INFO:tensorflow:global_step/sec: 12.5", 1.0) is None


def test_pattern_validation_gives_one_line_reasons() -> None:
    assert pattern_error(r"step (?P<step>\d+)") is None
    for bad, word in [(r"step (\d+", "regular expression"), (r"step \d+", "no named group"),
                      (r"(?P<steps>\d+)", "unknown group name(s) steps")]:
        error = pattern_error(bad)
        assert error is not None and word in error and "\n" not in error
    with pytest.raises(ValueError, match="progress_pattern"):
        compile_pattern(r"(?P<bogus>x)")
    assert set(KNOWN_GROUPS) == {"step", "global_step", "loss", "examples", "examples_per_s", "steps_per_s"}


def test_garbage_and_huge_lines_never_raise_and_stay_cheap() -> None:
    lp = LineProgress(r"(?P<step>\d+)/(?P<loss>\S+)")
    junk = ["\x00\xff\ufffd", "loss = , step = ", "Epoch x/y", "global_step/sec: nanx", "1/2 - loss: abc",
            "\x1b[31m", "\b\b\b", "=" * 10, " - loss: 1e999999"]
    for line in junk:
        lp.feed(line, 1.0)
    huge = "x" * 2_000_000 + " loss = 0.25, step = 9 (0.1 sec)"
    started = time.process_time()
    s = LineProgress().feed(huge, 2.0)
    assert time.process_time() - started < 0.5
    assert s is not None and s.global_step == 9 and s.loss == 0.25  # the tail of a long line is kept


def test_prefixed_keras_lines_from_absl_logging() -> None:
    """keras.config.disable_interactive_logging() sends the same text through absl logging."""
    lp = LineProgress()
    lp.feed("I1203 07:53:31.121690 139807844703104 io_utils.py:113] Epoch 1/2", 1.0)
    lp.feed("I1203 07:53:32.121690 139807844703104 io_utils.py:113] 50/50 - 1s - 6ms/step - loss: 0.9", 2.0)
    lp.feed("I1203 07:53:33.121690 139807844703104 io_utils.py:113] Epoch 2/2", 3.0)
    s = lp.feed("I1203 07:53:34.121690 139807844703104 io_utils.py:113] 50/50 - 1s - 6ms/step - loss: 0.5", 4.0)
    assert s is not None and (s.local_step, s.loss) == (100, 0.5)
