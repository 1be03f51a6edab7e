"""Every kind of bad hosts.toml gives one line: file:line, key path, what is wrong, a suggestion."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.config.load import load_config
from orchestrator.config.modes import Mode
from orchestrator.errors import ConfigError
from orchestrator.plan.from_file import plan_config, plan_file

# A valid cluster that each case breaks in one place.
GOOD = """\
[cluster]
name = "t"

[[hosts]]
name = "ps-1"
address = "10.0.0.21"
roles = ["ps"]

[[hosts]]
name = "gpu-a"
address = "10.0.0.11"
roles = ["chief", "worker"]
gpus = [0, 1]
"""


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """load_config honours ~/.ssh/config: point ~ at an empty directory, never the developer's own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def error_for(tmp_path: Path, text: str | bytes, name: str = "hosts.toml", mode: Mode | None = None) -> ConfigError:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        plan_file(path, mode)
    line = info.value.one_line()
    assert "\n" not in line and "Traceback" not in line
    assert "errors.pydantic.dev" not in line and "Input should be" not in line
    return info.value


def test_good_config_loads(tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text(GOOD)
    config = load_config(tmp_path / "hosts.toml")
    assert [h.name for h in config.hosts] == ["ps-1", "gpu-a"]


def test_toml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "batch_size = \n")
    assert err.one_line() == f"{tmp_path}/hosts.toml:14: TOML syntax error: invalid value (column 14)"


def test_unquoted_address_suggests_quotes(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('"10.0.0.11"', "10.0.0.11"))
    assert err.line == 11
    assert "TOML syntax error: invalid value `10.0.0.11`: strings need quotes" in err.one_line()
    assert err.one_line().endswith('(did you mean `"10.0.0.11"`?)')


def test_key_given_twice_is_a_syntax_error_with_the_key(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + 'name = "again"\n')
    assert err.line == 14
    assert "`name` is given twice" in err.one_line()


def test_unknown_host_key_suggests_nearest(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace("gpus = [0, 1]", "gpu = [0, 1]"))
    assert err.one_line() == f"{tmp_path}/hosts.toml:13: hosts[1].gpu: unknown key `gpu` (did you mean `gpus`?)"


def test_unknown_top_level_section_suggests_nearest(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "[trainig]\nsteps = 10\n")
    assert err.one_line() == f"{tmp_path}/hosts.toml:14: trainig: unknown section `trainig` (did you mean `training`?)"


def test_unknown_section_key_suggests_nearest(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('name = "t"', 'name = "t"\nbase_prot = 24000'))
    assert err.line == 3
    assert "cluster.base_prot: unknown key `base_prot` (did you mean `base_port`?)" in err.one_line()


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "[remote]\nzzz = 1\n")
    assert "remote.zzz: unknown key `zzz`; valid here: python, workdir" in err.one_line()
    assert err.suggestion is None


def test_unknown_key_in_host_ssh_subtable(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "[hosts.ssh]\nusr = \"me\"\n")
    assert err.line == 15
    assert "hosts[1].ssh.usr: unknown key `usr` (did you mean `user`?)" in err.one_line()


def test_wrong_type_says_expected_and_got(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + '[training]\nsteps = "100"\n')
    assert err.one_line() == (
        f'{tmp_path}/hosts.toml:15: training.steps: expected an integer, got a string `"100"` (did you mean `100`?)'
    )


def test_wrong_type_bool_is_not_an_integer(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace("gpus = [0, 1]", "gpus = [0, true]"))
    assert "hosts[1].gpus[1]: expected an integer, got a boolean `true`" in err.one_line()
    assert err.line == 13


def test_scalar_where_an_array_is_expected_suggests_brackets(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('roles = ["ps"]', 'roles = "ps"'))
    assert err.line == 7
    assert 'hosts[0].roles: expected an array, got a string `"ps"` (did you mean `["ps"]`?)' in err.one_line()


def test_sync_true_explains_sync_replicas(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "[training]\nsync = true\n")
    line = err.one_line()
    assert line.startswith(f"{tmp_path}/hosts.toml:15: training.sync: ")
    assert "`sync` is the list of files" in line and "`sync_replicas = true`" in line
    assert err.suggestion == "sync_replicas = true"


def test_duplicate_host_name(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + '[[hosts]]\nname = "gpu-a"\naddress = "10.0.0.12"\nroles = ["worker"]\n')
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:15: hosts[2].name: host name `gpu-a` is already used by hosts[1]; "
        "every [[hosts]] entry needs its own name"
    )


def test_duplicate_address_and_port(tmp_path: Path) -> None:
    # Same address, and the port is the [ssh] default 22 for one and an explicit 22 for the other.
    text = GOOD + '[[hosts]]\nname = "gpu-b"\naddress = "10.0.0.11"\nroles = ["worker"]\nssh = { port = 22 }\n'
    err = error_for(tmp_path, text)
    assert err.line == 16
    assert "hosts[2].address: host `gpu-b` has the same SSH address and port (10.0.0.11:22) as `gpu-a`" in err.one_line()


def test_same_address_on_another_port_is_another_machine(tmp_path: Path) -> None:
    text = GOOD + '[[hosts]]\nname = "gpu-b"\naddress = "10.0.0.11"\nroles = ["worker"]\nssh = { port = 2222 }\n'
    (tmp_path / "hosts.toml").write_text(text)
    assert len(load_config(tmp_path / "hosts.toml").hosts) == 3


def test_same_address_behind_different_jump_hosts_is_allowed(tmp_path: Path) -> None:
    text = GOOD + '[[hosts]]\nname = "far"\naddress = "10.0.0.11"\nroles = ["worker"]\nssh = { proxy_jump = "gw2" }\n'
    (tmp_path / "hosts.toml").write_text(text)
    assert len(load_config(tmp_path / "hosts.toml").hosts) == 3


def test_two_aliases_of_one_machine_in_ssh_config(tmp_path: Path, isolated_home: Path) -> None:
    (isolated_home / ".ssh").mkdir()
    (isolated_home / ".ssh" / "config").write_text("Host box-a box-b\n  HostName 10.0.0.30\n  Port 2200\n")
    text = GOOD + '[[hosts]]\nname = "a"\naddress = "box-a"\nroles = ["worker"]\n'
    text += '[[hosts]]\nname = "b"\naddress = "box-b"\nroles = ["worker"]\n'
    err = error_for(tmp_path, text)
    assert err.line == 20
    assert err.one_line().startswith(
        f"{tmp_path}/hosts.toml:20: hosts[3].address: host `b` (`box-b`) and `a` (`box-a`, hosts[2]) are the same "
        "machine once the ssh config is applied (10.0.0.30:2200)"
    )
    # with the ssh config switched off they are two names, as written
    (tmp_path / "hosts.toml").write_text(text + '[ssh]\nconfig_file = "none"\n')
    assert len(load_config(tmp_path / "hosts.toml").hosts) == 4


def test_unknown_role_suggests_nearest(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('["chief", "worker"]', '["chief", "wroker"]'))
    assert err.one_line() == (
        f'{tmp_path}/hosts.toml:12: hosts[1].roles[1]: `"wroker"` is not a role; choose one of ps, worker, chief '
        "(did you mean `worker`?)"
    )


def test_unknown_literal_value_suggests_nearest(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('name = "t"', 'name = "t"\nmode = "between_graph"'))
    assert err.line == 3
    assert "cluster.mode: `\"between_graph\"` is not a valid `mode`" in err.one_line()
    assert err.suggestion == "between-graph"


def test_no_ps_in_between_graph_mode(tmp_path: Path) -> None:
    text = GOOD.replace('roles = ["ps"]', 'roles = ["worker"]')
    err = error_for(tmp_path, text)
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:4: hosts: between-graph mode needs a parameter server: give a host the role `ps` "
        '(roles = ["ps"])'
    )


def test_no_ps_points_at_an_explicit_mode(tmp_path: Path) -> None:
    text = GOOD.replace('roles = ["ps"]', 'roles = ["worker"]').replace('name = "t"', 'name = "t"\nmode = "between-graph"')
    err = error_for(tmp_path, text)
    assert err.line == 3 and err.key == "cluster.mode"


def test_no_worker_at_all(tmp_path: Path) -> None:
    text = GOOD.replace('["chief", "worker"]', '["chief"]')
    err = error_for(tmp_path, text)
    assert err.one_line() == (
        f'{tmp_path}/hosts.toml:4: hosts: no worker: give at least one host the role `worker` (roles = ["worker"])'
    )


def test_gpu_index_given_twice(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace("gpus = [0, 1]", "gpus = [0, 1, 1]"))
    assert err.one_line() == f"{tmp_path}/hosts.toml:13: hosts[1].gpus: GPU index 1 is given twice"


def test_ssh_port_out_of_range(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "[ssh]\nport = 70000\n")
    assert err.one_line() == f"{tmp_path}/hosts.toml:15: ssh.port: port 70000 is out of range (1-65535)"


def test_host_ssh_port_out_of_range_in_inline_table(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "ssh = { user = \"x\", port = 0 }\n")
    assert err.one_line() == f"{tmp_path}/hosts.toml:14: hosts[1].ssh.port: port 0 is out of range (1-65535)"


def test_base_port_out_of_range(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('name = "t"', 'name = "t"\nbase_port = 80'))
    assert err.one_line() == f"{tmp_path}/hosts.toml:3: cluster.base_port: port 80 is out of range (1024-65535)"


def test_base_port_plus_tasks_beyond_65535(tmp_path: Path) -> None:
    # ps:0, chief:0 (GPU 0), worker:0 (GPU 1) and the 2 hosts' supervisors = 5 ports: 65534 ... 65538.
    err = error_for(tmp_path, GOOD.replace('name = "t"', 'name = "t"\nbase_port = 65534'))
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:3: cluster.base_port: base_port 65534 leaves no room for the plan's 5 ports "
        "(one per task, one per host's supervisor) (the last would be 65538 > 65535); use base_port <= 65531"
    )


def test_empty_file(tmp_path: Path) -> None:
    err = error_for(tmp_path, "  \n\n")
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml: file is empty: describe your machines in [[hosts]] tables (see hosts.example.toml)"
    )


def test_comments_only_file_has_no_hosts(tmp_path: Path) -> None:
    err = error_for(tmp_path, "# nothing yet\n")
    assert "hosts: no [[hosts]] table: describe at least one machine" in err.one_line()


def test_file_not_utf8(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.encode() + b'# caf\xe9 in latin-1\n')
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:14: not UTF-8 text (byte 0xe9 at column 6); save the file as UTF-8"
    )


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.one_line() == f"{tmp_path}/nope.toml: file not found (copy hosts.example.toml to start one)"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert "is a directory" in info.value.one_line()


def test_hosts_as_a_single_table(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[hosts]\nname = "a"\naddress = "x"\nroles = ["ps", "worker"]\n')
    assert err.line == 1
    assert "hosts must be an array of tables: write [[hosts]]" in err.one_line()


def test_missing_required_key_points_at_its_table(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('address = "10.0.0.11"\n', ""))
    assert err.one_line() == f"{tmp_path}/hosts.toml:9: hosts[1].address: required key `address` is missing"


def test_two_chiefs(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace('roles = ["ps"]', 'roles = ["ps", "chief"]'))
    assert err.line == 12
    assert "hosts[1].roles: only one host may have role `chief`, but `ps-1` and `gpu-a` both do" in err.one_line()


def test_unknown_placeholder_in_command(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + '[training]\ncommand = "python t.py --task_index {task_index}"\n')
    assert err.line == 15
    assert "training.command: unknown placeholder {task_index}; known: {job}, {task}" in err.one_line()
    assert err.suggestion == "{task}"


def test_unknown_builtin_model_suggests_nearest(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + '[training]\nmodel = "mpl"\n')
    assert err.line == 15 and err.suggestion == "mlp"


def test_slowdown_for_a_task_that_does_not_exist(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + '[training]\nslowdown = { "worker:5" = 2.0 }\n')
    assert err.line == 15
    assert 'training.slowdown."worker:5": the plan has no task worker:5' in err.one_line()


def test_first_problem_in_file_order_is_reported(tmp_path: Path) -> None:
    text = GOOD.replace('name = "t"', 'name = "t"\nbase_port = 1') + "[training]\nsteps = 0\n"
    err = error_for(tmp_path, text)
    assert err.key == "cluster.base_port" and err.line == 3


def test_section_written_as_array_of_tables(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace("[cluster]", "[[cluster]]"))
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:1: cluster: `cluster` is a single table: write [cluster], not [[cluster]] "
        "(did you mean `[cluster]`?)"
    )


def test_section_given_a_scalar(tmp_path: Path) -> None:
    err = error_for(tmp_path, "training = 5\n" + GOOD)
    assert err.one_line() == f"{tmp_path}/hosts.toml:1: training: expected a table, got an integer `5`"


def test_gpu_index_out_of_range(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD.replace("gpus = [0, 1]", "gpus = [0, 64]"))
    assert err.one_line() == f"{tmp_path}/hosts.toml:13: hosts[1].gpus[1]: GPU index 64 is out of range (0-63)"


def test_gpus_and_workers_together_point_at_the_host(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "workers = 2\n")
    assert err.line == 9
    assert "hosts[1]: give either `gpus` (one worker per GPU) or `workers` (CPU workers), not both" in err.one_line()


def test_positive_float_bound(tmp_path: Path) -> None:
    err = error_for(tmp_path, GOOD + "[ssh]\nconnect_timeout = 0\n")
    assert err.one_line() == f"{tmp_path}/hosts.toml:15: ssh.connect_timeout: `connect_timeout` 0 is out of range (must be > 0 and <= 600)"


def test_public_address_behind_an_alias_is_warned(tmp_path: Path, isolated_home: Path) -> None:
    (isolated_home / ".ssh").mkdir()
    (isolated_home / ".ssh" / "config").write_text("Host box-a\n  HostName 8.8.8.8\n")
    (tmp_path / "hosts.toml").write_text(GOOD + '[[hosts]]\nname = "a"\naddress = "box-a"\nroles = ["worker"]\n')
    plan = plan_config(load_config(tmp_path / "hosts.toml"))
    assert any(w.startswith("host a: 8.8.8.8 is a public address") for w in plan.warnings), plan.warnings


def test_alias_warning_names_the_real_hostname(tmp_path: Path, isolated_home: Path) -> None:
    (isolated_home / ".ssh").mkdir()
    (isolated_home / ".ssh" / "config").write_text("Host box-a\n  HostName 10.0.0.30\n")
    (tmp_path / "hosts.toml").write_text(GOOD + '[[hosts]]\nname = "a"\naddress = "box-a"\nroles = ["worker"]\n')
    plan = plan_config(load_config(tmp_path / "hosts.toml"))
    assert plan.warnings == (
        "host a: `box-a` is an ssh config alias for 10.0.0.30; the cluster spec uses 10.0.0.30, which every "
        "other machine must be able to reach",
    )
    task = next(t for t in plan.tasks if t.host == "a")
    assert task.address == "10.0.0.30"
    assert f"10.0.0.30:{task.port}" in plan.cluster_spec[task.job]
    assert plan.host("a").address == "box-a"  # ssh still connects through the alias (User, ProxyJump...)


def test_a_mode_override_keeps_the_line_of_the_error(tmp_path: Path) -> None:
    """`start --mode in-graph` on a file without a ps: the error still names the file's line."""
    text = '[cluster]\nname = "c"\n\n[[hosts]]\nname = "w"\naddress = "10.0.0.2"\nroles = ["worker"]\n'
    err = error_for(tmp_path, text, mode="in-graph")
    assert err.line is not None and err.one_line().startswith(f"{tmp_path}/hosts.toml:")
    assert "in-graph mode keeps the variables on a parameter server" in err.message


@pytest.mark.parametrize(("args", "expected"), [
    ('model = "wide"\nmodel_args = { shards = 0 }', "training.model_args.shards: `shards` = 0 is out of range (1-1024)"),
    ('model = "wide"\nmodel_args = { classes = 0 }', "training.model_args.classes: `classes` = 0 is out of range (2-100000)"),
    ('model = "wide"\nmodel_args = { params = "lots" }', "training.model_args.params: `params` must be an integer, got 'lots'"),
    ('model_args = { hidden = "x" }', "training.model_args.hidden: `hidden` must list layer sizes like \"256,256\", got 'x'"),
    ('model = "wide"\nmodel_args = { params = 1e12 }', "training.model_args.params: `params` = 1000000000000 is out of range (1000-1000000000)"),
    ('model_args = { hiden = "8" }', "training.model_args.hiden: `mlp` has no argument `hiden`; its arguments: input_dim, hidden, classes (did you mean `hidden`?)"),
])
def test_model_args_are_checked_with_one_line(tmp_path: Path, args: str, expected: str) -> None:
    err = error_for(tmp_path, GOOD + "[training]\n" + args + "\n")
    assert err.one_line().endswith(expected), err.one_line()
    assert err.line is not None
