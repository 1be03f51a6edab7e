"""Every value that reaches a remote shell is inert, in every quoting context: a property test against
real shells, each one a host's /bin/sh may be (dash, bash as `bash --posix`, busybox sh). Hypothesis
generates hostile values (quotes, `$(...)`, backticks, globs, newlines, unicode) for each `command`
placeholder, in bare, double-quoted, single-quoted, `$(...)`, backtick, here-document, arithmetic and
comment positions, and for the paths (`python`, `workdir`, synced file names) the orchestrator's own
scripts quote; each run checks the program saw exactly the value and that nothing else ran (a canary).
Where no quoting holds in every shell (inside `${...}`, a quoted here-document, bash's [[ ]], after a
backslash, another placeholder than {task} in arithmetic) `plan` refuses the template in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.config.command import COMMAND_PLACEHOLDERS, arg_env_name, fill_command
from orchestrator.errors import ConfigError
from orchestrator.transport.base import shell_command
from tests.helpers.local_start import file_sets, prepared
from tests.requires import POSIX_SHELLS, posix_shell

HOSTILE = "$`\"'\\;|&()<>*?[]{}~#! \t\n=%^,.:@éλ中🙂"
# Each value also tries to run something: if any shell re-read it, the canary would appear.
ATTACKS = ("$(touch CANARY)", "`touch CANARY`", "'; touch CANARY; '", '"; touch CANARY; "', "$'\\x41'")
value = st.one_of(
    st.text(alphabet=st.sampled_from(HOSTILE + "abc"), min_size=0, max_size=24),
    st.sampled_from(ATTACKS).flatmap(lambda a: st.text(alphabet=HOSTILE, max_size=6).map(lambda t: t + a + t)),
).filter(lambda v: "\x00" not in v)
one_line = value.filter(lambda v: v.strip() and not any(ord(c) < 32 or ord(c) == 127 for c in v) and "/" not in v
                          and v not in (".", ".."))  # . and .. name directories, never a file or program

# (template around the placeholder, how the printed text is turned back into the value)
CONTEXTS = {
    "heredoc": ("cat <<EOF\nv={p} \"'\nEOF", lambda out: out.removeprefix("v=").removesuffix(" \"'\n")),
    "heredoc in $(...)": ("printf '%s' \"$(cat <<-END\n\tv={p}.\n\tEND\n)\"",
                          lambda out: out.removeprefix("v=").removesuffix(".")),
    "after a comment": ("# it's {p}\nprintf '%s' {p}", lambda out: out),
    "bare": ("printf '%s' {p}", lambda out: out),
    "double": ('printf "%s" "v={p}"', lambda out: out.removeprefix("v=")),
    "single": ("printf '%s' 'v={p}'", lambda out: out.removeprefix("v=")),
    "mixed": ("printf '%s' \"a\"'b'{p}\"c\"", lambda out: out.removeprefix("ab").removesuffix("c")),
    "substitution": ("printf '%s' \"$(printf '%s.' {p})\"", lambda out: out.removesuffix(".")),
    "backticks": ("printf '%s' \"`printf '%s.' {p}`\"", lambda out: out.removesuffix(".")),
}
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(script: str, env: dict[str, str], cwd: Path, shell: str = "/bin/sh") -> str:
    argv = [shell] if shell == "/bin/sh" else posix_shell(shell)
    res = subprocess.run([*argv, "-c", script], cwd=cwd, env={"PATH": os.environ["PATH"], **env},
                         capture_output=True, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.decode()


@pytest.mark.parametrize("shell", list(POSIX_SHELLS))
@pytest.mark.parametrize("context", list(CONTEXTS))
@FAST
@given(name=st.sampled_from(COMMAND_PLACEHOLDERS), v=value)
def test_a_placeholder_reaches_the_program_as_its_exact_value(shell: str, context: str, name: str, v: str,
                                                               tmp_path: Path) -> None:
    template, unwrap = CONTEXTS[context]
    script = fill_command(template.replace("{p}", "{" + name + "}"))
    out = _run(script, {arg_env_name(name): v}, tmp_path, shell)
    assert unwrap(out) == v
    assert not (tmp_path / "CANARY").exists()


@pytest.mark.parametrize("shell", list(POSIX_SHELLS))
@FAST
@given(task=st.integers(min_value=0, max_value=10**6), hostile=value)
def test_task_in_arithmetic_is_its_number_and_a_hostile_value_runs_nothing(shell: str, task: int, hostile: str,
                                                                          tmp_path: Path) -> None:
    """`echo $(( {task} + 41 ))` prints 41 + task. bash evaluates a value inside $((...)) as an
    expression (an `a[$(cmd)]` in it runs cmd): whatever the value, only its digits get in."""
    script = fill_command("printf '%s' $(( {task} + 41 ))")
    assert _run(script, {arg_env_name("task"): str(task)}, tmp_path, shell) == str(task + 41)
    for attack in (hostile, "a[$(touch CANARY)]", "1+a[`touch CANARY`]"):
        argv = posix_shell(shell)
        res = subprocess.run([*argv, "-c", script], cwd=tmp_path, env={"PATH": os.environ["PATH"],
                             arg_env_name("task"): attack}, capture_output=True, check=False)
        assert res.returncode != 0 or res.stdout.decode().isdigit(), res
        assert not (tmp_path / "CANARY").exists(), (shell, attack)


@pytest.mark.parametrize(("template", "context"), [
    ("echo ${{HOME:-{job}}}", "inside ${...}"),
    ("echo $'{job}'", "inside $'...'"),
    ("echo a\\{job}", "after a backslash"),
    ('echo "a\\{job}"', "after a backslash"),
    ("echo $(( {job} + 1 ))", "inside arithmetic $((...)): only {task}"),
    ("(( {job} > 0 )) && echo x", "inside arithmetic $((...)): only {task}"),
    ("[[ {task} -eq 0 ]] && echo x", "inside bash's [[ ... ]]"),
    ("cat <<'EOF'\n{job}\nEOF", "inside a quoted here-document"),
    ("cat <<\\EOF\n{job}\nEOF", "inside a quoted here-document"),
    ("cat <<{job}\nx\n", "inside a here-document's delimiter"),
])
def test_a_placeholder_where_no_quoting_holds_is_refused_naming_the_context(template: str, context: str) -> None:
    with pytest.raises(ConfigError) as refused:
        fill_command(template)
    assert "placeholder {" in str(refused.value) and context in str(refused.value), refused.value
    assert "\n" not in str(refused.value)


def test_plan_refuses_such_a_template_in_one_line_exit_2(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[cluster]\nname = "q"\n\n[[hosts]]\nname = "box"\naddress = "127.0.0.1"\n'
                     'roles = ["ps", "worker"]\ntransport = "local"\n\n[training]\n'
                     'command = "echo $(( {job} + 41 ))"\n')
    res = subprocess.run([sys.executable, "-m", "tfcluster", "plan", str(hosts)], check=False, capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 2 and res.stdout == "", res
    assert res.stderr.count("\n") == 1 and "inside arithmetic $((...))" in res.stderr, res.stderr


@FAST
@given(python_name=one_line, workdir_name=one_line)
def test_paths_in_the_orchestrators_own_commands_stay_inert(python_name: str, workdir_name: str,
                                                           tmp_path: Path) -> None:
    """`python` and `workdir` as the remote shell gets them: shell_command's quoting, a real /bin/sh."""
    base = tmp_path / "x"
    (base / "work").mkdir(parents=True, exist_ok=True)
    (base / "bin").mkdir(exist_ok=True)
    workdir = base / "work" / workdir_name
    workdir.mkdir(exist_ok=True)
    python = base / "bin" / python_name
    if not python.exists():
        python.symlink_to(sys.executable)
    script = shell_command([str(python), "-c", "import os; print(os.getcwd())"], cwd=str(workdir))
    assert _run(script, {}, base).rstrip("\n") == str(workdir)
    assert not (base / "CANARY").exists() and not (tmp_path / "CANARY").exists()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(file_name=one_line.filter(lambda v: not v.startswith("~")))  # a leading ~ means a home directory
def test_synced_file_names_ship_inertly(file_name: str, tmp_path: Path) -> None:
    """A synced file with a hostile name, in a hostile workdir, goes through the start conversation's
    shipping (blob frames on the launcher's stdin, cache, tree, links: training/launcher.py) unharmed."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / file_name).write_text("payload\n")
    workdir = tmp_path / "work $(touch CANARY) `x`"
    with prepared(workdir, file_sets(src, [file_name]), "r"):
        assert (workdir / "runs" / "r" / "local" / "code" / file_name).read_text() == "payload\n"
    assert not any(p.name == "CANARY" for p in tmp_path.rglob("CANARY"))
