"""phalanx.ml without running jobs: command() builds the spec the YAML loader makes,
dumps YAML the CLI accepts, and refuses bad input with one line naming the argument."""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import servers
from conftest import Cli
from phalanx.errors import PhalanxError, SpecError
from phalanx.ml import Input, MLClient, MLError, Output, command, load_job
from phalanx.ml.constants import AssetTypes, InputOutputModes
from phalanx.ml.entities import (
    AccountKeyConfiguration,
    AmlCompute,
    AmlTokenConfiguration,
    AzureBlobDatastore,
    CommandJobLimits,
    Compute,
    Data,
    Environment,
    JobResourceConfiguration,
    ManagedIdentityConfiguration,
    Model,
    MpiDistribution,
    PyTorchDistribution,
    QueueSettings,
    TensorFlowDistribution,
    UserIdentityConfiguration,
)
from phalanx.ml.specdict import validate
from phalanx.spec import load_spec, load_spec_text
from test_spec import FULL_JOB


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with src/, data/ and the spec of FULL_JOB, as the current folder."""
    (tmp_path / "src").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "labels.csv").write_text("a\n")
    (tmp_path / "job.yml").write_text(FULL_JOB)
    monkeypatch.chdir(tmp_path)
    # An MLClient here reaches a workspace of this test only.
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("PHALANX_SERVER", "PHALANX_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path


def record(spec_dict: Any) -> dict[str, Any]:
    data: dict[str, Any] = spec_dict.to_record()
    data.pop("$schema", None)  # Azure ML's editor hint; the SDK writes none
    return data


def full_job_from_python() -> Any:
    """FULL_JOB of test_spec, written as an Azure ML SDK user writes it."""
    return command(
        name="resnet50-ddp_1",
        display_name="ResNet-50 on 2 nodes",
        experiment_name="imagenet",
        description="the reference workload",
        tags={"team": "vision", "version": 2},
        code="src",
        command="python train.py --epochs ${{inputs.epochs}} --lr ${{ inputs.lr }} "
        "--data ${{inputs.data}} --out ${{outputs.model}}",
        environment="azureml:AzureML-pytorch@latest",
        environment_variables={"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": 4},
        inputs={
            "epochs": 10,
            "lr": 0.1,
            "data": Input(type=AssetTypes.URI_FOLDER, path="./data"),
            "labels": Input(
                type=AssetTypes.URI_FILE, path="file://labels.csv", mode=InputOutputModes.DOWNLOAD
            ),
            "remote": Input(path="azureml://datastores/blob/paths/imagenet", mode="direct"),
        },
        outputs={"model": Output(), "logs": Output(mode=InputOutputModes.UPLOAD, path="out/logs")},
        compute="azureml:local",
        instance_count=2,
        instance_type="Standard_NC24",
        distribution=PyTorchDistribution(process_count_per_instance=4),
        limits=CommandJobLimits(timeout=7200),
        retry={"max_attempts": 3, "retry_on_exit_codes": [1, 137]},
        queue_settings=QueueSettings(job_tier="Spot"),
    )


def test_every_field_of_the_full_yaml_job_gives_the_same_spec(here: Path) -> None:
    job = full_job_from_python()
    assert record(validate(job)) == record(load_spec(here / "job.yml"))
    # The attributes read as in Azure ML.
    assert job.resources.instance_count == 2
    assert isinstance(job.distribution, PyTorchDistribution)
    assert job.inputs["data"].path == "./data" and job.limits.timeout == 7200


# (command() keyword arguments, the job.yml that says the same) for the fields FULL_JOB lacks.
MORE_FIELDS = [
    pytest.param(
        {"distribution": MpiDistribution(process_count_per_instance=2), "instance_count": 2},
        "distribution: {type: mpi, process_count_per_instance: 2}\nresources: {instance_count: 2}",
        id="mpi",
    ),
    pytest.param(
        {
            "distribution": {"type": "TensorFlow", "worker_count": 2, "parameter_server_count": 2},
            "resources": {"instance_count": 2},
        },
        "distribution: {type: tensorflow, worker_count: 2, parameter_server_count: 2}\n"
        "resources: {instance_count: 2}",
        id="tensorflow-dict-any-case",
    ),
    pytest.param(
        {"distribution": TensorFlowDistribution(worker_count=1)},
        "distribution: {type: tensorflow, worker_count: 1}",
        id="tensorflow-class",
    ),
    pytest.param(
        {"distribution": {"type": "PYTORCH", "process_count_per_instance": 3}},
        "distribution: {type: pytorch, process_count_per_instance: 3}",
        id="pytorch-dict-upper-case",
    ),
    pytest.param(
        {
            "resources": JobResourceConfiguration(
                instance_count=2,
                shm_size="2g",
                gpus_per_instance=0,
                cpus_per_instance=1.5,
                memory_per_instance="1Gi",
            )
        },
        "resources: {instance_count: 2, shm_size: 2g, gpus_per_instance: 0, "
        "cpus_per_instance: 1.5, memory_per_instance: 1Gi}",
        id="resources",
    ),
    pytest.param(
        {"limits": {"timeout": "1h30m", "stall_timeout": "5m"}},
        "limits: {timeout: 1h30m, stall_timeout: 5m}",
        id="limits-durations",
    ),
    pytest.param({"timeout": 90}, "limits: {timeout: 90}", id="timeout-shortcut"),
    pytest.param(
        {"retry": {"max_attempts": 2, "max_preemptions": 3, "preemption_grace": "1m"}},
        "retry: {max_attempts: 2, max_preemptions: 3, preemption_grace: 1m}",
        id="retry",
    ),
    pytest.param(
        {"job_tier": "standard", "priority": "High"},
        "queue_settings: {job_tier: standard, priority: high}",
        id="queue-shortcuts",
    ),
    pytest.param(
        {"queue_settings": {"priority": 5}}, "queue_settings: {priority: 5}", id="priority-number"
    ),
    pytest.param(
        {"outputs": {"model": Output(type=AssetTypes.CUSTOM_MODEL, name="resnet", version="3")}},
        "outputs:\n  model: {type: custom_model, name: resnet, version: '3'}",
        id="output-registered",
    ),
    pytest.param(
        {
            "environment": Environment(
                image="mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04", conda_file="env.yml"
            )
        },
        "environment:\n  image: mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04\n"
        "  conda_file: env.yml",
        id="environment-inline",
    ),
    pytest.param(
        {"environment": {"pip_file": "requirements.txt"}},
        "environment: {pip_file: requirements.txt}",
        id="environment-dict",
    ),
    pytest.param(
        {
            "services": {"jupyter": {"type": "jupyter_lab", "port": 8888}},
            "identity": {"type": "user_identity"},
        },
        "services:\n  jupyter: {type: jupyter_lab, port: 8888}\nidentity: {type: user_identity}",
        id="recorded-blocks",
    ),
    pytest.param({"compute": "ray://head:10001"}, "compute: ray://head:10001", id="ray-compute"),
]


@pytest.mark.parametrize(("kwargs", "yaml_text"), MORE_FIELDS)
def test_more_fields_give_the_same_spec(kwargs: dict[str, Any], yaml_text: str, here: Path) -> None:
    (here / "env.yml").write_text("dependencies: [python]\n")
    (here / "requirements.txt").write_text("\n")
    job = command(command="python t.py", **kwargs)
    from_yaml = load_spec_text(f"command: python t.py\n{yaml_text}\n", base_dir=here)
    assert record(validate(job)) == record(from_yaml)


def test_dump_writes_yaml_the_cli_accepts(here: Path, cli: Cli) -> None:
    job = full_job_from_python()
    del job.inputs["remote"]  # its datastore does not exist here
    job.command = job.command.replace("--data", "--remote x --data")
    elsewhere = here / "specs" / "dumped.yml"
    elsewhere.parent.mkdir()
    job.dump(elsewhere)
    text = elsewhere.read_text()
    assert "code: ../src" in text  # relative paths follow the file
    assert record(load_spec(elsewhere)) == record(validate(job))
    proc = cli.run("job", "validate", "-f", str(elsewhere))
    assert proc.returncode == 0, proc.stderr
    assert "2 node(s) × 4 process(es) on local" in proc.stdout
    # load_job reads it back into the same job.
    again = load_job(elsewhere)
    assert record(validate(again)) == record(validate(job))


# (command() keyword arguments, field named, phrase of the message).
BAD_INPUT = [
    pytest.param({"instance_count": "two"}, "instance_count", "must be an integer; got 'two'",
                 id="wrong-type-shortcut"),
    pytest.param({"instance_count": 0}, "instance_count", "must be at least 1; got 0",
                 id="zero-nodes"),
    pytest.param({"resources": {"instance_count": 0}}, "resources.instance_count",
                 "must be at least 1", id="zero-nodes-in-resources"),
    pytest.param({"resources": [2]}, "resources", "must be JobResourceConfiguration(...) or a dict",
                 id="resources-list"),
    pytest.param({"distribution": "horovod"}, "distribution",
                 "must be PyTorchDistribution(...), MpiDistribution(...)",
                 id="distribution-string"),
    pytest.param({"distribution": {"type": "horovod"}}, "distribution.type",
                 "must be one of pytorch, mpi, tensorflow; got 'horovod'",
                 id="unknown-distribution"),
    pytest.param({"distribution": {"type": "pytorch", "proces_count_per_instance": 2}},
                 "distribution.proces_count_per_instance",
                 "did you mean 'process_count_per_instance'?", id="distribution-typo"),
    pytest.param({"distribution": PyTorchDistribution(process_count_per_instance=0)},
                 "distribution.process_count_per_instance", "must be at least 1",
                 id="zero-processes"),
    pytest.param({"command": "python t.py ${{inputs.dta}}", "inputs": {"data": 1}}, "command",
                 "${{inputs.dta}} names no input; declared inputs: data", id="undeclared-input"),
    pytest.param({"command": "python t.py ${{outputs.model}}"}, "command",
                 "names no output", id="undeclared-output"),
    pytest.param({"inputs": {"d": [1, 2]}}, "inputs.d",
                 "must be Input(type=..., path=...) or a literal", id="input-list"),
    pytest.param({"inputs": {"d": Input(type="uri_folder")}}, "inputs.d.path",
                 "required but missing", id="input-without-path"),
    pytest.param({"inputs": {"d": Input(path="x", mode="rw_mount")}}, "inputs.d.mode",
                 "must be one of ro_mount, download, direct", id="bad-input-mode"),
    pytest.param({"inputs": {"d": Input(type=AssetTypes.MLTABLE, path="x")}}, "inputs.d.type",
                 "input type 'mltable' is not supported yet", id="mltable-input"),
    pytest.param({"inputs": {"d": Input(type="integer", default=3)}}, "inputs.d",
                 "Input(default=...) is for components", id="component-input"),
    pytest.param({"outputs": {"m": 3}}, "outputs.m", "must be Output(type=...); got int",
                 id="output-int"),
    pytest.param({"command": 3}, "command", "must be a string; got int", id="command-int"),
    pytest.param({"command": None}, "command", "required but missing", id="no-command"),
    pytest.param({"code": 3}, "code", "must be a local folder", id="code-int"),
    pytest.param({"code": "nope"}, "code", "does not exist; code is relative to the current folder",
                 id="code-missing"),
    pytest.param({"environment": 3}, "environment", "must be Environment(image=..., ",
                 id="environment-int"),
    pytest.param({"environment_variables": {"1X": "a"}}, "environment_variables.1X",
                 "not a valid environment variable name", id="bad-env-name"),
    pytest.param({"tags": ["a"]}, "tags", "must be a dict; got list", id="tags-list"),
    pytest.param({"timeout": "2 hours"}, "timeout", "duration like", id="bad-timeout"),
    pytest.param({"name": "_bad"}, "name", "is not a valid job name", id="bad-name"),
    pytest.param({"docker_args": "--ipc=host"}, "docker_args",
                 "is not a parameter phalanx supports", id="unknown-parameter"),
    pytest.param({"enviroment": "x"}, "enviroment", "did you mean 'environment'?",
                 id="misspelt-parameter"),
    pytest.param({"inputs": {"d": Input(path="./nope")}}, "inputs.d.path",
                 "'./nope' does not exist; the path is relative to the current folder",
                 id="missing-local-input"),
    pytest.param({"inputs": {"d": Input(type="uri_file", path="./data")}}, "inputs.d.path",
                 "'./data' is a folder, not a file", id="uri-file-is-a-folder"),
    pytest.param({"queue_settings": {"job_tier": "gold"}}, "queue_settings.job_tier",
                 "must be one of spot, basic, standard, premium", id="bad-tier"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "field", "phrase"), BAD_INPUT)
def test_bad_input_is_one_line_naming_the_argument(
    kwargs: dict[str, Any], field: str, phrase: str, here: Path
) -> None:
    arguments = {"command": "python t.py", **kwargs}
    with pytest.raises(MLError) as caught:
        command(**arguments)
    err = caught.value
    assert isinstance(err, PhalanxError) and isinstance(err, SpecError)
    assert err.field == field, str(err)
    assert phrase in err.message
    line = str(err)
    assert line.startswith(f"command(): {field}: ") and "\n" not in line
    assert "pydantic" not in line and "validation error" not in line


def test_attributes_changed_after_command_are_validated_at_submission(here: Path) -> None:
    job = command(command="python t.py", instance_count=2)
    job.limits.timeout = "soon"
    with pytest.raises(MLError, match=r"^command\(\): limits\.timeout: must be .*got 'soon'"):
        MLClient().jobs.create_or_update(job)
    job.limits.timeout = None
    job.inputs["data"] = ["not", "an", "input"]
    with pytest.raises(MLError, match=r"^command\(\): inputs\.data: must be Input"):
        MLClient().jobs.create_or_update(job)


def test_import_is_light() -> None:
    code = (
        "import sys, phalanx.ml, phalanx.ml.entities, phalanx.ml.constants\n"
        "heavy = [m for m in ('torch', 'sqlalchemy', 'ray', 'fastapi', 'tensorflow') "
        "if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ml_client_takes_azure_ml_arguments_and_config(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / ".azureml").mkdir()
    config = {"subscription_id": "sub", "resource_group": "rg", "workspace_name": "team-ws"}
    (here / ".azureml" / "config.json").write_text(json.dumps(config))
    client = MLClient.from_config(object())
    assert (client.subscription_id, client.resource_group_name, client.workspace_name) == (
        "sub",
        "rg",
        "team-ws",
    )
    assert client.where == str((here / "home").resolve())
    MLClient(object(), "sub", "rg", "team-ws")
    err = capsys.readouterr().err
    # Each note once per process, whatever the number of clients.
    assert err.count("does not use the credential") <= 1
    assert err.count("workspace_name 'team-ws' is served by") <= 1
    with pytest.raises(MLError, match=r"no config\.json in"):
        MLClient.from_config(path=here / "src")
    with pytest.raises(MLError, match=r"environments\.create_or_update\(\): name: .* needs a name"):
        client.environments.create_or_update(Environment(image="x"))


def test_blob_datastore_is_created_read_listed_and_deleted(
    here: Path, azurite: servers.Azurite
) -> None:
    container = f"c{uuid.uuid4().hex[:12]}"
    azurite.container(container)
    azurite.upload(container, {"train/a.txt": b"1"})
    ml_client = MLClient()
    made = ml_client.datastores.create_or_update(
        AzureBlobDatastore(
            name="blobs",
            account_name=servers.AZURITE_ACCOUNT,
            container_name=container,
            endpoint=azurite.endpoint,
            credentials=AccountKeyConfiguration(account_key=servers.AZURITE_KEY),
        )
    )
    assert isinstance(made, AzureBlobDatastore)
    assert (made.container_name, made.endpoint) == (container, azurite.endpoint)
    # Read back, the credential is where it is kept, never its value.
    assert servers.AZURITE_KEY not in repr(made) and "secrets file" in str(made.credentials)
    assert [d.name for d in ml_client.datastores.list()] == ["default", "blobs"]
    assert ml_client.datastores.get_default().type == "local"
    with pytest.raises(PhalanxError, match="datastore 'blobs' already exists"):
        ml_client.datastores.create_or_update(
            AzureBlobDatastore(name="blobs", account_name="a", container_name="c")
        )
    with pytest.raises(MLError, match=r"credentials: must be AccountKeyConfiguration"):
        ml_client.datastores.create_or_update(
            AzureBlobDatastore(name="x", account_name="a", container_name="c", credentials=3)  # type: ignore[arg-type]
        )
    ml_client.datastores.delete("blobs")
    assert [d.name for d in ml_client.datastores.list()] == ["default"]


def test_bad_input_to_the_operations_names_the_call_and_field(here: Path) -> None:
    ml_client = MLClient()
    cases = [
        (lambda: ml_client.jobs.create_or_update("job.yml"),  # type: ignore[arg-type]
         "ml_client.jobs.create_or_update(): job: must be a job made by command(...) or a "
         "sweep job made by job.sweep(...); got str"),
        (lambda: ml_client.jobs.list(status="Done"),
         "ml_client.jobs.list(): status: must be one of Queued"),
        (lambda: ml_client.data.create_or_update(Data(name="d")),
         "ml_client.data.create_or_update(): path: is required"),
        (lambda: ml_client.data.get("d", label="best"),
         "ml_client.data.get(): label: phalanx knows the label 'latest' only; got 'best'"),
        (lambda: ml_client.models.create_or_update(
            Model(name="m", path=".", type=AssetTypes.MLFLOW_MODEL)),
         "ml_client.models.create_or_update(): type: type 'mlflow_model' is not supported yet"),
        (lambda: ml_client.environments.get("pytorch", label="best"),
         "ml_client.environments.get(): label: only 'latest' is a label here; got 'best'"),
    ]  # fmt: skip
    for call, start in cases:
        with pytest.raises(MLError) as caught:
            call()
        assert str(caught.value).startswith(start) and "\n" not in str(caught.value)
    with pytest.raises(PhalanxError, match="job 'nope' not found"):
        ml_client.jobs.get("nope")


def test_amlcompute_becomes_a_local_target_and_an_unknown_compute_is_one_line(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ml_client = MLClient()
    # Azure ML's tutorial: get the cluster, and create it if it is missing.
    with pytest.raises(MLError) as caught:
        ml_client.compute.get("cpu-cluster")
    assert str(caught.value) == (
        "ml_client.compute.get(): name: compute target 'cpu-cluster' not found (known: local); "
        "create it with ml_client.compute.begin_create_or_update(AmlCompute(name='cpu-cluster'))"
    )
    # An unknown compute at submission names `compute` and the fixes in Python.
    job = command(command="python t.py", compute="cpu-cluster")
    with pytest.raises(MLError) as caught:
        ml_client.jobs.create_or_update(job)
    line = str(caught.value)
    assert line.startswith("command(): compute: compute target 'cpu-cluster' not found")
    assert 'compute="local"' in line and "AmlCompute(name='cpu-cluster')" in line
    assert "\n" not in line and caught.value.__cause__ is None
    cluster = AmlCompute(
        name="cpu-cluster",
        type="amlcompute",
        size="STANDARD_DS3_V2",
        min_instances=0,
        max_instances=4,
        idle_time_before_scale_down=180,
        tier="Dedicated",
    )
    made = ml_client.compute.begin_create_or_update(cluster).result()
    assert (made.name, made.type, made.size, made.tier) == (
        "cpu-cluster", "local", "STANDARD_DS3_V2", "Dedicated"
    )  # fmt: skip
    assert not made.settings["gpus"] and made.max_instances == 1
    got = ml_client.compute.get("cpu-cluster")
    assert got.size is None and got.min_instances is None and got.hosts
    noted = capsys.readouterr().err
    assert noted.count("AmlCompute(...) without a Ray cluster a local target") == 1
    assert "address='ray://HEAD:10001' (or set PHALANX_RAY_ADDRESS)" in noted
    # Created again (and through MLClient.create_or_update): kept as it is.
    again = ml_client.create_or_update(AmlCompute(name="cpu-cluster", size="STANDARD_NC6"))
    assert again.name == "cpu-cluster" and "kept as it is" in capsys.readouterr().err
    assert [c.name for c in ml_client.compute.list()] == ["local", "cpu-cluster"]
    assert ml_client.jobs._check_compute(job) is None  # now it exists
    with pytest.raises(MLError, match=r"^AmlCompute\(\): sizee: .*did you mean 'size'\?$"):
        AmlCompute(name="x", sizee="STANDARD_DS3_V2")  # type: ignore[call-arg]
    with pytest.raises(MLError, match=r"type: phalanx\.ml creates AmlCompute\(\.\.\.\) as a local"):
        ml_client.compute.begin_create_or_update(Compute(name="r", type="kubernetes"))
    with pytest.raises(MLError, match=r"tier: 'low_priority': this machine is not taken away"):
        ml_client.compute.begin_create_or_update(AmlCompute(name="spot", tier="low_priority"))
    assert "spot" not in [c.name for c in ml_client.compute.list()]


def test_client_create_or_update_dispatches_by_kind(here: Path) -> None:
    ml_client = MLClient()
    (here / "data" / "w.bin").write_bytes(b"1")
    data = ml_client.create_or_update(Data(name="d", path="./data"))
    assert (data.name, data.version) == ("d", "1")
    with pytest.raises(PhalanxError, match=r"d:1 already exists .*give another version= or leave"):
        ml_client.create_or_update(Data(name="d", version="1", path="./data"))
    model = ml_client.begin_create_or_update(Model(name="m", path="./data")).result()
    assert (model.name, model.version) == ("m", "1")
    assert "sha256" not in repr(model)  # each file's checksum is not a notebook's business
    with pytest.raises(MLError, match="needs a name"):
        ml_client.create_or_update(Environment(image="x"))
    with pytest.raises(MLError, match=r"^MLClient\.create_or_update\(\): entity: must be a job"):
        ml_client.create_or_update("job.yml")
    with pytest.raises(MLError, match=r"experiment_nam: .*did you mean 'experiment_name'"):
        ml_client.create_or_update(command(command="python t.py"), experiment_nam="x")


# (a call with a misspelt keyword, the start of its one line).
TYPOS = [
    (lambda: MLClient(credentail=None), "MLClient(): credentail: is not a keyword argument; "
     "did you mean 'credential'?"),
    (lambda: MLClient().jobs.list(max_result=1), "ml_client.jobs.list(): max_result: is not a "
     "keyword argument; did you mean 'max_results'?"),
    (lambda: MLClient().jobs.create_or_update(command(command="python t.py"), experiment_nam="x"),
     "ml_client.jobs.create_or_update(): experiment_nam: is not a keyword argument; did you "
     "mean 'experiment_name'?"),
    (lambda: MLClient().jobs.download("n", download_pth="."), "ml_client.jobs.download(): "
     "download_pth: is not a keyword argument; did you mean 'download_path'?"),
    (lambda: MLClient().models.get(), "ml_client.models.get(): missing a required argument: "
     "'name'"),
    (lambda: PyTorchDistribution(process_count=2), "PyTorchDistribution(): process_count: is "
     "not a keyword argument; did you mean 'process_count_per_instance'?"),
    (lambda: Data(paht="./data"), "Data(): paht: is not a keyword argument; did you mean 'path'?"),
    (lambda: Input(paths="./data"), "Input(): paths: is not a keyword argument; did you mean "
     "'path'?"),
    (lambda: Input(typ="uri_folder"), "Input(): typ: is not a keyword argument; did you mean "
     "'type'?"),
    (lambda: Output(nmae="m"), "Output(): nmae: is not a keyword argument; did you mean 'name'?"),
    (lambda: JobResourceConfiguration(instance_cont=2), "JobResourceConfiguration(): "
     "instance_cont: is not a keyword argument; did you mean 'instance_count'?"),
]  # fmt: skip


def test_misspelt_keywords_outside_command_are_one_line_with_a_suggestion(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for call, line in TYPOS:
        with pytest.raises(MLError) as caught:
            call()
        assert str(caught.value) == line
    # Azure ML's own keywords are taken.
    ml_client = MLClient(None, "sub", "rg", "ws", registry_name=None, show_progress=False)
    assert list(ml_client.jobs.list(parent_job_name=None, list_view_type="ActiveOnly")) == []
    job = command(command="python t.py", environment="azureml:AzureML-pytorch@latest")
    returned = ml_client.jobs.create_or_update(job, skip_validation=True, description="d")
    assert returned.description == "d"
    # The environment's note gives its fix in Python.
    assert "environment=Environment(pip_file='requirements.txt')" in capsys.readouterr().err
    ml_client.jobs.begin_cancel(returned.name).result()
    # Given back with its name, a job read back is the job; phalanx cannot change its tags.
    again = ml_client.jobs.get(returned.name)
    assert ml_client.jobs.create_or_update(again).name == returned.name
    again.tags["reviewed"] = "yes"
    with pytest.raises(MLError, match=r"^ml_client\.jobs\.create_or_update\(\): tags: phalanx "
                       r"cannot change a submitted job's tags .*set job\.name = None"):  # fmt: skip
        ml_client.jobs.create_or_update(again)
    again.name = "renamed"  # a name of its own: a new job
    renamed = ml_client.jobs.create_or_update(again)
    assert (renamed.name, renamed.tags["reviewed"]) == ("renamed", "yes")
    ml_client.jobs.begin_cancel(renamed.name).result()


def test_jobs_are_edited_as_in_azure_ml(here: Path) -> None:
    (here / "other").mkdir()
    train = command(
        command="python t.py --data ${{inputs.data}} --epochs ${{inputs.epochs}} "
        "--out ${{outputs.model}}",
        inputs={"data": Input(path="./data"), "epochs": 3},
        outputs={"model": Output()},
        identity=UserIdentityConfiguration(),
    )
    # Inputs and outputs are attributes as well as keys.
    train.inputs.epochs = 5
    assert train.inputs["epochs"] == 5 and train.inputs.data.path == "./data"
    train.outputs.model.mode = "upload"
    with pytest.raises(AttributeError, match="the job has no input 'epoch'; its inputs: data"):
        train.inputs.epoch  # noqa: B018
    # Calling a command binds inputs into a new job, as Azure ML's builder does.
    bound = train(data=Input(path="./other"), epochs=7)
    assert bound is not train and train.inputs.epochs == 5
    assert bound.spec_dict["inputs"] == {"data": {"type": "uri_folder", "path": "./other"},
                                         "epochs": 7}  # fmt: skip
    with pytest.raises(MLError, match=r"^command\(\) called: epoch: is not a declared input; "
                       r"did you mean 'epochs'\?$"):  # fmt: skip
        train(epoch=3)
    train.set_resources(instance_count=2, shm_size="2g", instance_type="STANDARD_NC6")
    train.set_limits(timeout=60)
    train.set_queue_settings(job_tier="spot", priority="high")
    spec = train.spec_dict
    assert spec["resources"] == {"instance_count": 2, "instance_type": "STANDARD_NC6",
                                 "shm_size": "2g"}  # fmt: skip
    assert spec["limits"] == {"timeout": 60}
    assert spec["queue_settings"] == {"job_tier": "spot", "priority": "high"}
    assert spec["outputs"] == {"model": {"type": "uri_folder", "mode": "upload"}}
    assert spec["identity"] == {"type": "user_identity"}
    with pytest.raises(MLError, match=r"^command\(\): resources\.instance_count: must be at least"):
        train.set_resources(instance_count=0)
    with pytest.raises(MLError, match=r"set_limits\(\): timout: .*did you mean 'timeout'"):
        train.set_limits(timout=3)
    identities = [
        (ManagedIdentityConfiguration(client_id="abc"), {"type": "managed_identity",
                                                         "client_id": "abc"}),
        (AmlTokenConfiguration(), {"type": "aml_token"}),
    ]  # fmt: skip
    for identity, block in identities:
        assert command(command="python t.py", identity=identity).spec_dict["identity"] == block
    # Azure ML's default datastore is phalanx's.
    blob = Input(path="azureml://datastores/workspaceblobstore/paths/imagenet/train")
    with_blob = command(command="python t.py ${{inputs.d}}", inputs={"d": blob})
    assert (
        with_blob.spec_dict["inputs"]["d"]["path"]
        == "azureml://datastores/default/paths/imagenet/train"
    )


def test_a_submitted_job_reads_well_in_a_notebook(here: Path) -> None:
    job = command(command="python t.py", display_name="<b>ddp</b> & co", compute="local")
    assert repr(job) == "Command(name=None, command='python t.py', compute='local')"
    job.name, job.status, job.studio_url = "n1", "Queued", "http://127.0.0.1:8766/jobs/n1?a=<x>"
    assert repr(job) == (
        "Command(name='n1', status='Queued', display_name='<b>ddp</b> & co', "
        "experiment_name=None, compute='local', studio_url='http://127.0.0.1:8766/jobs/n1?a=<x>')"
    )
    page = job._repr_html_()
    assert "<td>&lt;b&gt;ddp&lt;/b&gt; &amp; co</td>" in page and "<b>" not in page
    assert '<a href="http://127.0.0.1:8766/jobs/n1?a=&lt;x&gt;"' in page


def test_backend_errors_are_one_line_without_phalanx_frames(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ml_client = MLClient()
    with pytest.raises(PhalanxError) as caught:
        ml_client.jobs.get("nope")
    err = caught.value
    assert str(err) == "job 'nope' not found; ml_client.jobs.list() shows the jobs"
    assert err.__cause__ is None and err.__suppress_context__
    frames = [f.name for f in traceback.extract_tb(err.__traceback__)]
    assert frames[-1] == "wrapper" and len(frames) <= 3, frames
    for call, line in [
        (lambda: ml_client.data.get("nope", version="1"), "ml_client.data.get(): name: data "
         "asset 'nope' not found; register it with ml_client.data.create_or_update("
         "Data(name='nope', path=...))"),
        (lambda: ml_client.models.get("nope"), "ml_client.models.get(): name: model 'nope' not "
         "found; register it with ml_client.models.create_or_update(Model(name='nope', "
         "path=...))"),
        (lambda: ml_client.data.create_or_update(Data(name="d", path="./nope")),
         "ml_client.data.create_or_update(): path: './nope' does not exist; the path is "
         "relative to the current folder"),
        (lambda: ml_client.data.create_or_update(Data(name="d", path="./data", type="uri_file")),
         "ml_client.data.create_or_update(): path: './data' is a folder; use type='uri_folder'"),
    ]:  # fmt: skip
        with pytest.raises(MLError) as caught_ml:
            call()
        assert str(caught_ml.value) == line
    # PHALANX_DEBUG=1 keeps phalanx's frames, as the CLI shows them.
    monkeypatch.setenv("PHALANX_DEBUG", "1")
    with pytest.raises(PhalanxError) as caught:
        ml_client.jobs.get("nope")
    assert len(traceback.extract_tb(caught.value.__traceback__)) > 3


def test_environments_are_registered_got_and_listed_as_the_cli_sees_them(here: Path) -> None:
    # At the project's root, beside the workspace itself: only what the file names is kept.
    (here / "requirements.txt").write_text("-r extra.txt\n")
    (here / "extra.txt").write_text("./wheels\n")
    (here / "wheels").mkdir()
    (here / "wheels" / "w.txt").write_text("a local package folder\n")
    ml_client = MLClient()
    made = ml_client.environments.create_or_update(
        Environment(name="reqs", pip_file="./requirements.txt", description="for the test")
    )
    assert (made.name, made.version, made.description) == ("reqs", "1", "for the test")
    again = ml_client.create_or_update(Environment(name="reqs", pip_file="requirements.txt"))
    assert again.version == "2"  # a new version each time; versions are immutable
    latest = ml_client.environments.get("reqs", label="latest")
    assert latest.version == "2" and latest.pip_file is not None
    kept = Path(str(latest.pip_file))
    assert kept.read_text() == (here / "requirements.txt").read_text()
    assert kept.is_relative_to(here / "home")  # a copy in the workspace, not the caller's file
    assert sorted(p.name for p in kept.parent.rglob("*")) == [
        "extra.txt", "requirements.txt", "w.txt", "wheels",
    ]  # fmt: skip
    (here / "outside.txt").write_text("-r ../elsewhere.txt\n")
    with pytest.raises(PhalanxError, match=r"elsewhere\.txt is outside the file's folder"):
        ml_client.environments.create_or_update(Environment(name="x", pip_file="outside.txt"))
    assert ml_client.environments.get("reqs", version="1").version == "1"
    assert [(e.name, e.version) for e in ml_client.environments.list()] == [
        ("reqs", "1"),
        ("reqs", "2"),
    ]
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "phalanx"), "environment", "show", "reqs:1", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(shown.stdout)["description"] == "for the test"
    with pytest.raises(PhalanxError, match="environment 'nope' not found"):
        ml_client.environments.get("nope")
    # A job names it as Azure ML's scripts do; the YAML loader takes it as it is.
    job = command(command="python -c 'print(1)'", environment="azureml:reqs@latest")
    assert job.environment == "azureml:reqs@latest"


def test_a_job_made_and_submitted_unchanged_is_parsed_once(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """command() validates, create_or_update() validates and creates: one parse of one text,
    and a job changed in between is parsed again."""
    import phalanx.spec

    parses: list[str] = []
    real = phalanx.spec.load_any_text  # what SpecText.load parses with

    def counted(text: str, **kwargs: Any) -> Any:
        parses.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(phalanx.spec, "load_any_text", counted)
    job = command(command="python -c 'print(41 + 1)'", compute="local")
    assert len(parses) == 1
    ml_client = MLClient()
    created = ml_client.jobs.create_or_update(job)
    assert created.status == "Queued" and len(parses) == 1, parses
    ml_client.jobs.stream(created.name)
    assert ml_client.jobs.get(created.name).status == "Completed"
    job.set_limits(timeout=60)
    assert validate(job).limits.timeout == 60 and len(parses) == 2
