"""Issue 33, item 11: a placeholder inside a string that a program reads again as shell code is refused.

`sh -c '...{job}...'`, `eval "...{job}..."`, `su -c`, `ssh host ...`, `sh <<EOF`: the reference tfcluster
writes there is inert for the shell that runs the command, but the inner shell would parse the VALUE
as code. Shown below under each shell a host's /bin/sh may be (dash, bash, busybox sh): the reference the
scanner alone would write there runs a hostile value's `touch CANARY`. So `plan` and `start` refuse such a
template (one line naming `training.command` and why, exit 2), and the ways the refusal suggests (the
value as the inner script's argument, or `"$TFCLUSTER_ARG_X"` read by the inner shell itself) deliver the
exact value and run nothing, under each shell; so do the uses that are not re-parsed and stay allowed.
"""

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
from tests.requires import POSIX_SHELLS, posix_shell

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "$`\"'\\;|&()<>*?[]{}~#! \t\n=%^,.:@éλ"
ATTACKS = ("$(touch CANARY)", "`touch CANARY`", "'; touch CANARY; '", '"; touch CANARY; "', "\n touch CANARY\n")
value = st.one_of(
    st.text(alphabet=st.sampled_from(HOSTILE + "abc"), max_size=20),
    st.sampled_from(ATTACKS).flatmap(lambda a: st.text(alphabet=HOSTILE, max_size=5).map(lambda t: t + a + t)),
).filter(lambda v: "\x00" not in v)
FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

REFUSED = [
    ("sh -c 'echo {job}'", "`sh -c` reads its script again"),
    ('sh -c "echo {job}"', "`sh -c` reads its script again"),
    ("bash -c {job}", "`bash -c` reads its script again"),
    ("bash -ec 'echo {job}'", "`bash -c` reads its script again"),
    ("bash -o pipefail -c 'echo {job} | cat'", "`bash -c` reads its script again"),
    ("dash -c -- 'echo {job}'", "`dash -c` reads its script again"),
    ("busybox sh -c 'echo {job}'", "`sh -c` reads its script again"),
    ("/bin/sh -c 'echo {task}'", "`sh -c` reads its script again"),
    ("env A=1 nohup timeout 10 sh -c 'echo {host}'", "`sh -c` reads its script again"),
    ("sudo -u nobody bash -c 'echo {job}'", "`bash -c` reads its script again"),
    ('sh -c "echo $(printf %s {job})"', "`sh -c` reads its script again"),  # the output carries the value in
    ("x=$(sh -c 'echo {job}'); echo \"$x\"", "`sh -c` reads its script again"),
    ('eval "echo {job}"', "eval reads its arguments again"),
    ("eval echo {ps_hosts}", "eval reads its arguments again"),
    ("true; eval 'echo '{job}", "eval reads its arguments again"),
    ("su -c 'echo {job}' nobody", "`su -c` hands its command to a shell"),
    ("su nobody --command='echo {job}'", "`su -c` hands its command to a shell"),
    ("runuser -u nobody -c 'echo {job}'", "`runuser -c` hands its command to a shell"),
    ("ssh box echo {job}", "ssh hands its command to the remote shell"),
    ("ssh -p 22 -o BatchMode=yes box 'echo {job}'", "ssh hands its command to the remote shell"),
    ("sh <<EOF\necho {job}\nEOF", "`sh` reads its script from it (a here-document)"),
    ("cat <<A\n$(date)\nA\nbash -s <<EOF\necho {job}\nEOF", "`bash` reads its script from it (a here-document)"),
    ("bash <<< 'echo {job}'", "`bash` reads its script from it"),
]


@pytest.mark.parametrize(("template", "why"), REFUSED)
def test_a_placeholder_a_nested_shell_would_reparse_is_refused(template: str, why: str) -> None:
    with pytest.raises(ConfigError) as refused:
        fill_command(template)
    said = str(refused.value)
    assert said.startswith("hosts.toml: training.command: placeholder {"), said
    assert "inside a nested shell's string" in said and why in said and "its value would run as code" in said, said
    assert "\n" not in said


ALLOWED = [
    "sh -c 'echo \"$1\"' sh {job}",  # the value as the inner script's argument: never parsed
    "sh -c 'echo \"$TFCLUSTER_ARG_JOB\"'",
    "sh {job}",  # a script file's name
    "sh -c 'echo x' > {job}",  # a redirection's file
    "cat <<EOF\necho {job}\nEOF",
    "{python} train.py eval {job}",  # `eval` as an argument of the user's program
    "{python} -u train.py --shell sh -c {job}",
    "ssh {host} hostname",  # the destination
    "# sh -c '{job}'\necho {job}",  # a comment
    "echo {job}; sh -c 'echo hi'",
]


@pytest.mark.parametrize("template", ALLOWED)
def test_what_no_shell_reparses_stays_allowed(template: str) -> None:
    fill_command(template)


def _run(shell: str, script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*posix_shell(shell), "-c", script], cwd=cwd, env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, check=False)


@pytest.mark.parametrize("shell", list(POSIX_SHELLS))
@pytest.mark.parametrize("attack", ["$(touch CANARY)", "`touch CANARY`", "x; touch CANARY", "x\ntouch CANARY",
                                    "x && touch CANARY"])
def test_without_the_refusal_the_inner_shell_runs_the_value(shell: str, attack: str, tmp_path: Path) -> None:
    """Why the refusal: the reference written for `'...'` (inert where it is) hands the inner shell the
    value as text of its script. `true` stands in for the nested shell while the template is filled (a
    template naming it is refused), then the shell under test takes its place."""
    inner = " ".join(posix_shell(shell))
    script = inner + fill_command("true -c 'printf %s {job}'").removeprefix("true")
    _run(shell, script, {arg_env_name("job"): attack}, tmp_path)
    assert (tmp_path / "CANARY").exists(), (shell, script)


@pytest.mark.parametrize("shell", list(POSIX_SHELLS))
@FAST
@given(name=st.sampled_from(COMMAND_PLACEHOLDERS), v=value)
def test_the_suggested_forms_deliver_the_exact_value_and_run_nothing(shell: str, name: str, v: str,
                                                                   tmp_path: Path) -> None:
    inner = " ".join(posix_shell(shell))
    var = arg_env_name(name)
    for template in (f"{inner} -c 'printf \"%s\" \"$1\"' sh {{{name}}}",
                     f"{inner} -c 'printf \"%s\" \"${var}\"'",
                     f"eval 'printf \"%s\" \"${var}\"'"):
        res = _run(shell, fill_command(template), {var: v}, tmp_path)
        assert res.returncode == 0 and res.stdout.decode() == v, (template, res)
        assert not (tmp_path / "CANARY").exists(), template


def _hosts(tmp_path: Path, command: str) -> Path:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[cluster]\nname = "i33"\n\n'
                     f'[remote]\nworkdir = "{tmp_path / "work"}"\n\n'
                     '[[hosts]]\nname = "box"\naddress = "127.0.0.1"\nroles = ["ps", "worker"]\ntransport = "local"\n\n'
                     f"[training]\ncommand = '''{command}'''\n")
    return hosts


@pytest.mark.parametrize("command", ["sh -c 'python3 train.py {job}'", 'eval "python3 train.py --task {task}"'])
def test_plan_and_start_refuse_it_in_one_line_exit_2(tmp_path: Path, state_dir: Path, command: str) -> None:
    hosts = _hosts(tmp_path, command)
    said = []
    for verb in ("plan", "start"):
        res = subprocess.run([sys.executable, "-m", "tfcluster", verb, str(hosts)], cwd=REPO, capture_output=True,
                             text=True, timeout=120, check=False, env={**os.environ, "COLUMNS": "200"})
        assert res.returncode == 2 and res.stdout == "", res
        assert res.stderr.count("\n") == 1 and "training.command: placeholder {" in res.stderr, res.stderr
        assert "inside a nested shell's string" in res.stderr, res.stderr
        said.append(res.stderr)
    assert said[0] == said[1]  # plan refuses what start refuses, with the same line
    assert not (state_dir / "runs").exists() and not (tmp_path / "work").exists()  # nothing half-started
