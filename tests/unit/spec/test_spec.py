"""phalanx.spec: loading Azure ML-style job specs, errors that name field and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.errors import PhalanxError, SpecError, SpecProblem
from phalanx.spec import (
    REFERENCE_RE,
    InputSpec,
    JobSpec,
    MpiDistribution,
    OutputSpec,
    PyTorchDistribution,
    interpolate,
    load_spec,
    load_spec_text,
    render_literal,
)

FULL_JOB = """\
$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
type: command
name: resnet50-ddp_1
display_name: ResNet-50 on 2 nodes
experiment_name: imagenet
description: the reference workload
tags:
  team: vision
  version: 2
code: src
command: >-
  python train.py --epochs ${{inputs.epochs}} --lr ${{ inputs.lr }}
  --data ${{inputs.data}} --out ${{outputs.model}}
environment: azureml:AzureML-pytorch@latest
environment_variables:
  NCCL_DEBUG: INFO
  OMP_NUM_THREADS: 4
inputs:
  epochs: 10
  lr: 0.1
  data:
    type: uri_folder
    path: ./data
  labels:
    type: uri_file
    path: file://labels.csv
    mode: download
  remote:
    path: azureml://datastores/blob/paths/imagenet
    mode: direct
outputs:
  model:
  logs:
    mode: upload
    path: out/logs
compute: azureml:local
resources:
  instance_count: 2
  instance_type: Standard_NC24
distribution:
  type: pytorch
  process_count_per_instance: 4
limits:
  timeout: 7200
retry:
  max_attempts: 3
  retry_on_exit_codes: [1, 137]
queue_settings:
  job_tier: Spot
"""


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "job.yml").write_text(FULL_JOB)
    return tmp_path


def test_full_azure_ml_job_loads(job_dir: Path) -> None:
    spec = load_spec(job_dir / "job.yml")

    assert spec.schema_ is not None and spec.schema_.endswith("commandJob.schema.json")
    assert (spec.name, spec.experiment_name, spec.display_name) == (
        "resnet50-ddp_1",
        "imagenet",
        "ResNet-50 on 2 nodes",
    )
    assert spec.tags == {"team": "vision", "version": "2"}
    assert spec.code == str(job_dir / "src")
    assert spec.code_path == job_dir / "src"
    assert spec.environment == "azureml:AzureML-pytorch@latest"
    assert spec.environment_variables == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4"}
    assert spec.compute == "local"

    assert spec.literal_inputs() == {"epochs": 10, "lr": 0.1}
    data = spec.inputs["data"]
    assert isinstance(data, InputSpec)
    assert (data.type, data.mode, data.path) == ("uri_folder", "ro_mount", str(job_dir / "data"))
    assert data.is_local and data.local_path == job_dir / "data"
    labels = spec.data_inputs()["labels"]
    assert (labels.type, labels.mode) == ("uri_file", "download")
    assert labels.local_path == job_dir / "labels.csv"
    remote = spec.data_inputs()["remote"]
    assert remote.path == "azureml://datastores/blob/paths/imagenet"
    assert not remote.is_local
    with pytest.raises(ValueError, match="not a local path"):
        _ = remote.local_path

    assert spec.outputs["model"] == OutputSpec()
    assert not spec.outputs["model"].is_local  # no path: phalanx chooses the folder
    assert spec.outputs["logs"].mode == "upload"
    assert spec.outputs["logs"].local_path == job_dir / "out" / "logs"

    assert isinstance(spec.distribution, PyTorchDistribution)
    assert (spec.instance_count, spec.process_count_per_instance, spec.world_size) == (2, 4, 8)
    assert spec.resources.instance_type == "Standard_NC24"
    assert spec.limits.timeout == 7200
    assert spec.retry.max_attempts == 3
    assert spec.retry.retry_on_exit_codes == [1, 137]
    assert spec.retry.max_preemptions == 10
    assert spec.queue_settings is not None and spec.queue_settings.job_tier == "spot"
    spec.check_supported()


def test_record_is_json_and_round_trips(job_dir: Path) -> None:
    spec = load_spec(job_dir / "job.yml")
    record = spec.to_record()

    assert json.loads(json.dumps(record)) == record
    assert record["$schema"].startswith("https://")
    assert "name" not in record["outputs"]["model"]  # None values are left out
    assert JobSpec.model_validate(record).to_record() == record


def test_validating_without_loader_keeps_paths_as_written() -> None:
    spec = JobSpec.model_validate(
        {"command": "x", "code": "src", "inputs": {"d": {"path": "data"}}}
    )
    assert spec.code == "src"
    assert spec.data_inputs()["d"].path == "data"


def test_minimal_spec_defaults(tmp_path: Path) -> None:
    spec = load_spec_text("command: python train.py\n", base_dir=tmp_path)

    assert spec.type == "command" and spec.experiment_name == "Default"
    assert spec.compute == "local" and spec.code is None
    assert (spec.instance_count, spec.process_count_per_instance, spec.world_size) == (1, 1, 1)
    assert spec.distribution is None and spec.distribution_type == "pytorch"
    assert spec.retry.max_attempts == 1 and spec.retry.retry_on_exit_codes == []
    assert spec.limits.timeout is None


def test_relative_input_resolves_against_base_dir(tmp_path: Path) -> None:
    text = "command: ls\ninputs:\n  d: {path: ../shared/d}\n  a: {path: /abs/x}\n"
    spec = load_spec_text(text, base_dir=tmp_path / "jobs")
    assert spec.data_inputs()["d"].path == str(tmp_path / "shared" / "d")
    assert spec.data_inputs()["a"].path == "/abs/x"


@pytest.mark.parametrize(
    "uri",
    [
        "azureml://datastores/workspaceblobstore/paths/data/",
        "azureml:imagenet:3",
        "azureml:imagenet@latest",
        "https://example.com/data.tar",
        "az://container/data",
        "abfs://container@account.dfs.core.windows.net/data",
        "s3://bucket/data",
    ],
)
def test_uris_are_kept_as_written(uri: str, tmp_path: Path) -> None:
    spec = load_spec_text(f"command: ls\ninputs:\n  d:\n    path: {uri}\n", base_dir=tmp_path)
    data = spec.data_inputs()["d"]
    assert data.path == uri and not data.is_local


def test_mpi_spec_counts_processes_per_instance(tmp_path: Path) -> None:
    text = "command: x\nresources:\n  instance_count: 2\ndistribution:\n  type: MPI\n"
    spec = load_spec_text(text, source="job.yml", base_dir=tmp_path)
    assert isinstance(spec.distribution, MpiDistribution)
    assert (spec.process_count_per_instance, spec.world_size) == (1, 2)
    spec.check_supported()


def test_tensorflow_tasks_are_shared_among_the_nodes(tmp_path: Path) -> None:
    text = "command: x\nresources: {instance_count: 2}\ndistribution: {type: tensorflow}\n"
    spec = load_spec_text(text, base_dir=tmp_path)
    assert (spec.tensorflow_workers, spec.process_count_per_instance, spec.world_size) == (2, 1, 2)
    text = (
        "command: x\nresources: {instance_count: 2}\n"
        "distribution: {type: tensorflow, worker_count: 2, parameter_server_count: 2}\n"
    )
    spec = load_spec_text(text, base_dir=tmp_path)
    assert (spec.tensorflow_tasks, spec.process_count_per_instance, spec.world_size) == (4, 2, 4)
    uneven = load_spec_text(
        "command: x\nresources: {instance_count: 2}\n"
        "distribution: {type: tensorflow, worker_count: 3}\n",
        source="job.yml",
        base_dir=tmp_path,
    )
    with pytest.raises(SpecError) as caught:
        uneven.check_supported()
    assert caught.value.field == "distribution.worker_count"
    assert "multiple of instance_count" in caught.value.one_line()


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(PhalanxError, match=r"job spec file '.*nope\.yml' not found") as caught:
        load_spec(tmp_path / "nope.yml")
    assert not isinstance(caught.value, SpecError)
    assert "\n" not in str(caught.value)


# (YAML text, --set items, field, line, phrase of the message).
# Line None means the error has no line in the file (a missing field, or --set).
BAD_SPECS = [
    pytest.param(
        "command: x\nresources:\n  instnce_count: 2\n",
        [],
        "resources.instnce_count",
        3,
        "unknown field 'instnce_count'; did you mean 'instance_count'?",
        id="typo-key-suggests",
    ),
    pytest.param(
        "command: x\nwhatever: 1\n",
        [],
        "whatever",
        2,
        "known fields: $schema, type, name",
        id="unknown-key-lists-known",
    ),
    pytest.param(
        "command: x\nschema: http://x\n",
        [],
        "schema",
        2,
        "did you mean '$schema'?",
        id="alias-suggested",
    ),
    pytest.param(
        "command: x\nresources:\n  instance_count: 0\n",
        [],
        "resources.instance_count",
        3,
        "must be at least 1; got 0",
        id="instance-count-zero",
    ),
    pytest.param(
        "command: x\nresources:\n  instance_count: two\n",
        [],
        "resources.instance_count",
        3,
        "must be an integer; got 'two'",
        id="instance-count-not-int",
    ),
    pytest.param(
        "command: x\ndistribution:\n  type: pytroch\n",
        [],
        "distribution.type",
        3,
        "must be one of pytorch, mpi, tensorflow; got 'pytroch'; did you mean 'pytorch'?",
        id="bad-distribution-type",
    ),
    pytest.param(
        "command: x\ndistribution:\n  process_count_per_instance: 2\n",
        [],
        "distribution.type",
        2,
        "add type: with one of pytorch, mpi, tensorflow",
        id="distribution-without-type",
    ),
    pytest.param(
        "command: x\ndistribution:\n  type: pytorch\n  process_count_per_instance: 0\n",
        [],
        "distribution.process_count_per_instance",
        4,
        "must be at least 1",
        id="process-count-zero",
    ),
    pytest.param(
        "name: job\ncode: .\n",
        [],
        "command",
        None,
        "required but missing; add e.g. command: python train.py",
        id="missing-command",
    ),
    pytest.param(
        "command: '  '\n",
        [],
        "command",
        1,
        "must not be empty",
        id="empty-command",
    ),
    pytest.param(
        "inputs:\n  epochs: 3\n  lr: 0.1\ncommand: python t.py --e ${{inputs.epochz}}\n",
        [],
        "command",
        4,
        "${{inputs.epochz}} names no input; declared inputs: epochs, lr",
        id="unknown-input-ref",
    ),
    pytest.param(
        "command: python t.py --out ${{ outputs.model }}\n",
        [],
        "command",
        1,
        "names no output; declared outputs: none",
        id="unknown-output-ref",
    ),
    pytest.param(
        "command: python t.py --lr ${{search_space.lr}}\n",
        [],
        "command",
        1,
        "${{search_space.lr}} is not supported in a command job",
        id="sweep-reference",
    ),
    pytest.param(
        "command: x\ninputs:\n  data:\n    path: d\n    mode: rw_mount\n",
        [],
        "inputs.data.mode",
        5,
        "must be one of ro_mount, download, direct; got 'rw_mount'; did you mean 'ro_mount'?",
        id="bad-input-mode",
    ),
    pytest.param(
        "command: x\ninputs:\n  data:\n    type: mltable\n    path: d\n",
        [],
        "inputs.data.type",
        4,
        "input type 'mltable' is not supported yet",
        id="mltable-input",
    ),
    pytest.param(
        "command: x\ninputs:\n  data:\n    type: uri_folder\n",
        [],
        "inputs.data.path",
        3,
        "required but missing",
        id="input-without-path",
    ),
    pytest.param(
        "command: x\ninputs:\n  data:\n    pth: d\n    path: d\n",
        [],
        "inputs.data.pth",
        4,
        "did you mean 'path'?",
        id="input-key-typo",
    ),
    pytest.param(
        "command: x\ninputs:\n  data: [1, 2]\n",
        [],
        "inputs.data",
        3,
        "must be a literal (string, number, true/false) or a mapping",
        id="input-list",
    ),
    pytest.param(
        "command: x\ninputs:\n  2data: 1\n",
        [],
        "inputs.2data",
        3,
        "is not a valid name",
        id="bad-input-name",
    ),
    pytest.param(
        "command: x\noutputs:\n  model:\n    mode: direct\n",
        [],
        "outputs.model.mode",
        4,
        "must be one of rw_mount, upload",
        id="bad-output-mode",
    ),
    pytest.param(
        "command: x\ncode: missing_src\n",
        [],
        "code",
        2,
        "missing_src' does not exist",
        id="missing-code-folder",
    ),
    pytest.param(
        "command: x\ncode: job.yml\n",
        [],
        "code",
        2,
        "job.yml' is not a folder",
        id="code-is-a-file",
    ),
    pytest.param(
        "command: x\nresources:\n  instance_count: 1\n  instance_count: 2\n",
        [],
        "resources.instance_count",
        4,
        "duplicate key 'instance_count' (first given on line 3)",
        id="duplicate-key",
    ),
    pytest.param(
        "command: x\nresources:\n  instance_count: 1\n   bad: [\n",
        [],
        None,
        4,
        "not valid YAML",
        id="yaml-syntax-error",
    ),
    pytest.param(
        "command: x\ninputs: {epochs: [1, 2\n\n",
        [],
        None,
        2,
        "the file ends before this is closed",
        id="yaml-unclosed-bracket",
    ),
    pytest.param(
        "command: x\nresources:\n\tinstance_count: 2\n",
        [],
        None,
        3,
        "found character '\\t'",
        id="yaml-tab-indent",
    ),
    pytest.param(
        "- command: x\n- command: y\n",
        [],
        None,
        1,
        "must be a mapping of key: value lines; got a list",
        id="non-mapping-document",
    ),
    pytest.param(
        "# nothing here\n",
        [],
        None,
        None,
        "the job spec is empty",
        id="empty-document",
    ),
    pytest.param(
        "command: x\nlimits:\n  timeout: 2 hours\n",
        [],
        "limits.timeout",
        3,
        "duration like '90s', '30m', '2h', '1h30m'; got '2 hours'",
        id="bad-timeout",
    ),
    pytest.param(
        "command: x\nlimits:\n  timeout: 0s\n",
        [],
        "limits.timeout",
        3,
        "must be more than 0 seconds",
        id="zero-timeout",
    ),
    pytest.param(
        "command: x\nname: _starts-badly\n",
        [],
        "name",
        2,
        "is not a valid job name; start with a letter or digit",
        id="bad-name",
    ),
    pytest.param(
        "command: x\ncompute: http://head:8265\n",
        [],
        "compute",
        2,
        "compute target 'http://head:8265' is not local, a Ray address",
        id="bad-compute",
    ),
    pytest.param(
        "type: pipeline\ncommand: x\n",
        [],
        "type",
        1,
        "job type 'pipeline' is not supported",
        id="pipeline-job",
    ),
    pytest.param(
        "command: x\nenvironment_variables:\n  1ABC: x\n",
        [],
        "environment_variables.1ABC",
        3,
        "not a valid environment variable name",
        id="bad-env-var-name",
    ),
    pytest.param(
        "command: x\ntags:\n  a: [1]\n",
        [],
        "tags.a",
        3,
        "must be a string or a number; got a list",
        id="tag-list-value",
    ),
    pytest.param(
        "command: x\nretry:\n  retry_on_exit_codes: [1, x]\n",
        [],
        "retry.retry_on_exit_codes.1",
        3,
        "must be an integer; got 'x'",
        id="bad-exit-code",
    ),
    pytest.param(
        "command: x\nresources: 4\n",
        [],
        "resources",
        2,
        "must be a mapping with keys instance_count, instance_type, shm_size, "
        "gpus_per_instance, cpus_per_instance, memory_per_instance; got 4",
        id="block-not-mapping",
    ),
    pytest.param(
        "command: x\nresources:\n  instance_count: 0\n  bad: 1\n",
        [],
        "resources.instance_count",
        3,
        "must be at least 1; got 0",
        id="first-of-two-problems",
    ),
    pytest.param(
        "command: x\n",
        ["resources.instance_count"],
        "--set",
        None,
        "'resources.instance_count' is not a key=value pair; use --set key.path=value",
        id="set-without-equals",
    ),
    pytest.param(
        "command: x\n",
        ["=3"],
        "--set",
        None,
        "is not a key=value pair",
        id="set-empty-key",
    ),
    pytest.param(
        "command: x\n",
        ["command.sub=1"],
        "--set",
        None,
        "cannot set 'command.sub': 'command' is 'x', not a mapping",
        id="set-into-scalar",
    ),
    pytest.param(
        "command: x\nresources:\n  instance_count: 2\n",
        ["resources.instance_count=0"],
        "resources.instance_count",
        None,
        "must be at least 1; got 0 (from --set resources.instance_count=0)",
        id="set-bad-value",
    ),
]


@pytest.mark.parametrize(("text", "overrides", "field", "line", "phrase"), BAD_SPECS)
def test_bad_spec(
    text: str,
    overrides: list[str],
    field: str | None,
    line: int | None,
    phrase: str,
    tmp_path: Path,
) -> None:
    (tmp_path / "job.yml").write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, source="job.yml", base_dir=tmp_path, overrides=overrides)
    err = caught.value
    assert (err.field, err.line) == (field, line), err.one_line()
    assert phrase in err.message
    one_line = err.one_line()
    assert "\n" not in one_line
    where = "job.yml" if line is None else f"job.yml:{line}"
    if overrides and field != "--set":
        where = "--set"
    assert one_line.startswith(f"{where}: ")


def test_error_line_is_reported_through_load_spec(tmp_path: Path) -> None:
    path = tmp_path / "job.yml"
    path.write_text("command: x\n\n\n\n\n\nresources:\n  instance_count: 0\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.one_line() == (
        f"{path}:8: resources.instance_count: must be at least 1; got 0"
    )


# -- several problems --------------------------------------------------------

# A key misspelt so that a required field goes missing: the typo is the one
# problem (field, line, message); the missing field is not reported as well.
TYPOS_OF_REQUIRED_FIELDS = [
    pytest.param(
        'type: command\ncomand: python -c "print(1)"\n',
        ("comand", 2, "unknown field 'comand'; did you mean 'command'?"),
        id="top-level",
    ),
    pytest.param(
        "Command: x\n",
        ("Command", 1, "unknown field 'Command'; did you mean 'command'?"),
        id="top-level-case",
    ),
    pytest.param(
        "command: x\ninputs:\n  data:\n    type: uri_folder\n    pth: d\n",
        ("inputs.data.pth", 5, "unknown field 'pth'; did you mean 'path'?"),
        id="input",
    ),
    pytest.param(
        "command: x\ndistribution:\n  tpye: pytorch\n",
        ("distribution.tpye", 3, "unknown field 'tpye'; did you mean 'type'?"),
        id="distribution-tag",
    ),
]


@pytest.mark.parametrize(("text", "expected"), TYPOS_OF_REQUIRED_FIELDS)
def test_typo_of_a_required_field_is_reported_as_the_typo(
    text: str, expected: tuple[str, int, str]
) -> None:
    field, line, message = expected
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, source="job.yml")
    assert caught.value.problems == [SpecProblem(message, field=field, source="job.yml", line=line)]
    assert caught.value.one_line() == f"job.yml:{line}: {field}: {message}"


MANY_PROBLEMS = """\
comand: python t.py
resources:
  instance_count: 0
  instnce_type: x
distribution: {tpye: pytorch, foo: 1}
inputs:
  d:
    mode: rw_mount
    pth: x
"""


def test_every_problem_is_listed_in_line_order(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(MANY_PROBLEMS, source="job.yml", base_dir=tmp_path)
    err = caught.value
    assert [(p.field, p.line) for p in err.problems] == [
        ("comand", 1),
        ("resources.instance_count", 3),
        ("resources.instnce_type", 4),
        ("distribution.tpye", 5),
        ("distribution.foo", 5),
        ("inputs.d.mode", 8),
        ("inputs.d.pth", 9),
    ]
    assert {p.source for p in err.problems} == {"job.yml"}
    messages = [p.message for p in err.problems]
    assert "did you mean 'instance_type'?" in messages[2]
    assert "known fields: type, process_count_per_instance" in messages[4]
    assert not any("required but missing" in m or m.startswith("missing") for m in messages)
    # The one-line form (job create, run) is the first problem and the count.
    assert err.one_line() == (
        "job.yml:1: comand: unknown field 'comand'; did you mean 'command'? (and 6 more problems)"
    )
    assert str(err) == err.one_line()
    assert (err.field, err.line) == ("comand", 1)


def test_missing_field_without_a_near_miss_is_still_reported(tmp_path: Path) -> None:
    text = "name: job\ncode: .\nresources:\n  instance_count: 0\n"
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, source="job.yml", base_dir=tmp_path)
    assert [(p.field, p.line) for p in caught.value.problems] == [
        ("command", None),  # the document as a whole: first
        ("resources.instance_count", 4),
    ]
    assert "add e.g. command: python train.py" in caught.value.problems[0].message


def test_problems_from_set_name_the_override(tmp_path: Path) -> None:
    text = "command: x\nresources:\n  instance_count: 2\nretry:\n  max_attempts: 0\n"
    with pytest.raises(SpecError) as caught:
        load_spec_text(
            text,
            source="job.yml",
            base_dir=tmp_path,
            overrides=["resources.instance_count=0", "distribution.tpye=mpi"],
        )
    found = {(p.field, p.source, p.line) for p in caught.value.problems}
    assert found == {
        ("resources.instance_count", "--set", None),
        ("distribution.tpye", "--set", None),
        ("retry.max_attempts", "job.yml", 5),
    }
    by_field = {p.field: p.message for p in caught.value.problems}
    assert by_field["resources.instance_count"].endswith("(from --set resources.instance_count=0)")
    assert (
        "did you mean 'type'? (from --set distribution.tpye=mpi)" in by_field["distribution.tpye"]
    )


def test_a_spec_error_lists_every_problem_only_when_asked() -> None:
    err = SpecError.of(
        [SpecProblem("a", field="x", source="f", line=1), SpecProblem("b", source="f", line=2)]
    )
    assert err.lines() == ["f:1: x: a (and 1 more problem)"]
    err.every_problem = True
    assert err.lines() == ["f:1: x: a", "f:2: b"]
    assert SpecError("c", source="f").lines() == ["f: c"]


# -- overrides --------------------------------------------------------------


def test_overrides_parse_yaml_values_and_create_mappings(tmp_path: Path) -> None:
    text = "command: python t.py ${{inputs.epochs}}\ninputs:\n  epochs: 1\noutputs:\n"
    spec = load_spec_text(
        text,
        base_dir=tmp_path,
        overrides=[
            "inputs.epochs=3",
            "inputs.fast=true",
            "inputs.name=resnet",
            "resources.instance_count=2",
            "distribution.process_count_per_instance=4",
            "distribution.type=pytorch",
            "environment_variables.FOO=bar",
            "retry.retry_on_exit_codes=[1, 2]",
            "outputs.model=",
            "limits.timeout=1h",
            "tags.note=a=b",
        ],
    )
    assert spec.inputs["epochs"] == 3
    assert spec.inputs["fast"] is True
    assert spec.inputs["name"] == "resnet"
    assert spec.world_size == 8
    assert spec.environment_variables == {"FOO": "bar"}
    assert spec.retry.retry_on_exit_codes == [1, 2]
    assert spec.outputs["model"] == OutputSpec()
    assert not spec.outputs["model"].is_local  # no path: phalanx chooses the folder
    assert spec.limits.timeout == 3600
    assert spec.tags == {"note": "a=b"}


def test_later_override_wins(tmp_path: Path) -> None:
    spec = load_spec_text(
        "command: x\n",
        base_dir=tmp_path,
        overrides=["resources.instance_count=2", "resources.instance_count=3"],
    )
    assert spec.instance_count == 3


def test_override_value_that_is_not_yaml_is_kept_as_text(tmp_path: Path) -> None:
    spec = load_spec_text("command: x\n", base_dir=tmp_path, overrides=["command=echo a: b: c"])
    assert spec.command == "echo a: b: c"


# -- interpolation ------------------------------------------------------------


def test_reference_re_allows_whitespace() -> None:
    match = REFERENCE_RE.search("python t.py ${{  inputs.lr }}")
    assert match is not None and match.groups() == ("inputs", "lr")
    assert REFERENCE_RE.search("${{inputs.2x}}") is None


def test_interpolate_substitutes_inputs_and_outputs() -> None:
    command = "python t.py --lr ${{inputs.lr}} --fast ${{ inputs.fast }} --out ${{outputs.model}}"
    result = interpolate(
        command,
        {"lr": render_literal(0.1), "fast": render_literal(True)},
        {"model": "/runs/j1/outputs/model"},
        literals=("lr", "fast"),
    )
    assert result == "python t.py --lr 0.1 --fast true --out /runs/j1/outputs/model"


def test_interpolate_unknown_name() -> None:
    with pytest.raises(SpecError) as caught:
        interpolate("run ${{inputs.b}}", {"a": "1"}, {}, field="command")
    assert caught.value.field == "command"
    assert "${{inputs.b}} names no input; declared inputs: a" in caught.value.message


def test_interpolate_rejects_other_expressions() -> None:
    with pytest.raises(SpecError, match="not supported in a command job"):
        interpolate("run ${{parent.inputs.a}}", {"a": "1"}, {})


def test_text_without_references_is_unchanged() -> None:
    assert interpolate("echo $HOME ${X}", {}, {}) == "echo $HOME ${X}"


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (3, "3"), (0.5, "0.5"), ("a b", "a b")],
)
def test_render_literal(value: bool | int | float | str, text: str) -> None:
    assert render_literal(value) == text


# -- timeouts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        ("3600", 3600),
        ("'3600'", 3600),
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1h 30m 15s", 5415),
        ("1d", 86400),
        ("2H", 7200),
    ],
)
def test_timeout_parsing(timeout: str, seconds: int, tmp_path: Path) -> None:
    spec = load_spec_text(f"command: x\nlimits:\n  timeout: {timeout}\n", base_dir=tmp_path)
    assert spec.limits.timeout == seconds


@pytest.mark.parametrize("timeout", ["-5", "1.5h", "soon", "h", "true", "[1]", "30m1h"])
def test_bad_timeouts(timeout: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(f"command: x\nlimits:\n  timeout: {timeout}\n", base_dir=tmp_path)
    assert caught.value.field == "limits.timeout"
