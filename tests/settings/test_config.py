"""Run settings: every bad value stops ``run_simulation.py`` before Ray starts with
one line naming the key and the value; budgets are cycled or cut to the number of clients.

No Ray here: `run_simulation.simulate` is replaced, so a check that let a bad value through to
the simulation fails the test instead of starting one.
"""

from __future__ import annotations

import pytest

import run_simulation
from settings import (
    ConfigError,
    RunConfig,
    budget_of,
    budgets_for,
    check_budgets,
    check_data_here,
    check_device_here,
    default_config,
    describe_budgets,
    parse_budgets,
)

TINY = "model='tiny-vilt' dataset='synthetic'"


class SimulationStarted(Exception):
    pass


@pytest.fixture
def no_simulation(monkeypatch):
    """Record what would be simulated, and stop there."""
    calls = []

    def simulate(config, num_clients, client_cpus, client_gpus, cpus=None, engine="ray"):
        calls.append((config, num_clients))
        raise SimulationStarted

    monkeypatch.setattr(run_simulation, "simulate", simulate)
    return calls


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = run_simulation.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# Bad values a client would otherwise meet only in round 1: dataset, partitioner, device, then
# more of each kind.
BAD = {
    "dataset='medmnist-vqa:/no/such/dir'": ("dataset", "'medmnist-vqa:/no/such/dir'"),
    "partitioner='dirichlet:-1'": ("partitioner", "'dirichlet:-1'"),
    "device='tpu'": ("device", "'tpu'"),
    "partitioner='dirichlet:x'": ("partitioner", "'dirichlet:x'"),
    "partitioner='by-question-type:0'": ("partitioner", "'by-question-type:0'"),
    "partitioner='iid:3'": ("partitioner", "'iid:3'"),
    "dataset='medmnist-vqa:'": ("dataset", "'medmnist-vqa:'"),
    "dataset='mixed:synthetic'": ("dataset", "'mixed:synthetic'"),
    "dataset='mixed:synthetic+nope'": ("dataset", "'nope'"),
    "dataset='mixed:synthetic+medmnist-vqa:/no/such/dir'": ("dataset", "/no/such/dir"),
    "model='gpt'": ("model", "'gpt'"),
    "model='hf:/no/such/checkpoint'": ("model", "'hf:/no/such/checkpoint'"),
    "device='cuda:x'": ("device", "'cuda:x'"),
    "seed=-1": ("seed", "-1"),
    "budgets='6,0'": ("budgets", "'0'"),
    "budgets='6,x'": ("budgets", "'x'"),
    f"budgets='2,5' {TINY}": ("budgets", "5 exceeds the model's 4"),
    "min-nodes=6": ("min-nodes", "6"),
    "run-name='../elsewhere'": ("run-name", "'../elsewhere'"),
    f"resume-from='/no/such/run' budgets='2' {TINY}": ("resume-from", "/no/such/run"),
}


@pytest.mark.parametrize("setting", sorted(BAD))
def test_bad_value_stops_before_ray_with_one_line(setting, capsys, no_simulation):
    key, value = BAD[setting]
    code, out, err = run(capsys, "--num-clients", "5", "--run-config", setting)
    assert code == 2 and not no_simulation
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert key in err and value in err, err
    assert "Traceback" not in out + err


def test_cuda_device_the_clients_cannot_use_stops_before_ray(capsys, no_simulation):
    """Without CUDA here the device is unusable; with it, clients need a GPU share from Ray."""
    import torch

    code, _, err = run(capsys, "--client-gpus", "0", "--run-config", "device='cuda'")
    assert code == 2 and not no_simulation and err.count("\n") == 1
    if torch.cuda.is_available():
        assert err.startswith("error: device = 'cuda' needs --client-gpus > 0"), err
        missing = f"cuda:{torch.cuda.device_count()}"
        code, _, err = run(capsys, "--client-gpus", "1", "--run-config", f"device='{missing}'")
        assert code == 2 and not no_simulation and err.count("\n") == 1
        assert err.startswith(f"error: device = '{missing}' is not usable here"), err
    else:
        assert err.startswith("error: device = 'cuda' is not usable here"), err


def test_client_resources_must_be_positive(capsys, no_simulation):
    code, _, err = run(capsys, "--client-cpus", "0")
    assert code == 2 and "--client-cpus 0" in err and not no_simulation


def test_results_dir_that_cannot_be_written_stops_before_ray(capsys, no_simulation, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = run(capsys, "--run-config", f"results-dir='{blocker}/runs' budgets='2' {TINY}")
    assert code == 2 and not no_simulation and err.count("\n") == 1
    assert err.startswith(f"error: results-dir = '{blocker}/runs': cannot write"), err


def test_num_clients_zero_is_an_error(capsys, no_simulation):
    code, _, err = run(capsys, "--num-clients", "0")
    assert code == 2 and "--num-clients 0" in err and not no_simulation


@pytest.mark.parametrize(("num_clients", "used"), [(3, "2,1,3"), (8, "2,1,3,4,1,2,1,3")])
def test_any_number_of_clients_runs_and_the_budgets_used_are_printed(
        num_clients, used, capsys, no_simulation, tmp_path):
    code, out, err = run(capsys, "--num-clients", str(num_clients), "--run-config",
                         f"{TINY} budgets='2,1,3,4,1' results-dir='{tmp_path}'")
    assert [n for _, n in no_simulation] == [num_clients]  # got past every check into the simulation
    assert code == 1 and "the run failed" in err  # only because the stand-in simulation raised
    assert f"layer budgets of {num_clients} clients (partition 0..{num_clients - 1}): {used}" in out


@pytest.mark.parametrize(("budgets", "num_clients", "used"), [
    ("2", 5, "2,2,2,2,2"),  # one budget k: every client k layers (a budget sweep), not one client
    ("", 5, None),  # no list
    ("2,1,3", 3, "2,1,3"),  # one client per listed budget
])
def test_without_num_clients_a_single_budget_means_five_clients_with_that_budget(
        budgets, num_clients, used, capsys, no_simulation, tmp_path):
    code, out, _ = run(capsys, "--run-config", f"{TINY} budgets='{budgets}' results-dir='{tmp_path}'")
    assert [n for _, n in no_simulation] == [num_clients]
    if used is not None:
        assert f"layer budgets of {num_clients} clients (partition 0..{num_clients - 1}): {used}" in out


def test_default_budgets_are_cut_or_cycled_to_the_clients():
    default = str(default_config()["budgets"])
    assert parse_budgets(default) == [6, 6, 4, 4, 2]
    assert budgets_for(default, 3) == [6, 6, 4]
    assert budgets_for(default, 8) == [6, 6, 4, 4, 2, 6, 6, 4]
    assert budgets_for(default, 5) == [6, 6, 4, 4, 2]
    assert "the first 3" in describe_budgets(default, 3) and "cycled" in describe_budgets(default, 8)
    assert budget_of([6, "auto"], 3) == "auto" and budget_of([], 3) is None
    assert budgets_for("", 4) == []


@pytest.mark.parametrize(("text", "message"), [
    ("6,0", "'0' is not a positive int"), ("6,,4", "'' is not a positive int"),
    ("6,-1", "'-1' is not a positive int"), ("2.5", "'2.5' is not a positive int"),
])
def test_invalid_budget_entries_stay_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_budgets(text)


def test_budget_over_the_model_layers_is_an_error():
    check_budgets("13,auto", 13)
    with pytest.raises(ConfigError, match=r"budgets = '6,14': 14 exceeds the model's 13"):
        check_budgets("6,14", 13)


@pytest.mark.parametrize(("changes", "message"), [
    ({"partitioner": "dirichlet:-1"}, "partitioner = 'dirichlet:-1': gamma must be a positive number"),
    ({"partitioner": "random"}, "partitioner = 'random'"),
    ({"device": "tpu"}, "device = 'tpu' is unknown"),
    ({"device": "cuda:"}, "device = 'cuda:' is unknown"),
    ({"dataset": "medmnist"}, "dataset = 'medmnist' is unknown"),
    ({"dataset": "mixed:synthetic+mixed:easy-vqa+synthetic"}, "mixed"),
    ({"model": "hf:"}, "model = 'hf:' is unknown"),
    ({"seed": -3}, "seed = -3 is out of range"),
])
def test_run_config_rejects_malformed_values_without_touching_the_machine(changes, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_mapping({**default_config(), **changes})


@pytest.mark.parametrize("value", ["synthetic", "mixed:easy-vqa+synthetic-multilabel",
                                   "medmnist-vqa:/d", "hf:/m", "cuda:1", "mps", "by-question-type"])
def test_run_config_accepts_well_formed_values(value):
    key = {"hf:/m": "model", "cuda:1": "device", "mps": "device",
           "by-question-type": "partitioner"}.get(value, "dataset")
    assert getattr(RunConfig.from_mapping({**default_config(), key: value}), key) == value


def test_local_checks_name_the_setting_they_judge(tmp_path):
    with pytest.raises(ConfigError, match=r"^node config data-dir = '/d': no folder"):
        check_data_here("medmnist-vqa:/no/such/dir", "node config data-dir = '/d'")
    with pytest.raises(ConfigError, match=r"holds no \*\.npz$"):
        check_data_here(f"medmnist-vqa:{tmp_path}")
    (tmp_path / "a.npz").write_bytes(b"")
    check_data_here(f"mixed:synthetic+medmnist-vqa:{tmp_path}")
    saved = tmp_path / "saved"
    saved.mkdir()
    with pytest.raises(ConfigError, match=rf"^dataset = .*: folder '{saved}' holds no dataset_dict.json or"):
        check_data_here(f"hf-disk:{saved}?image=img")
    (saved / "state.json").write_text("{}")  # what Dataset.save_to_disk writes
    check_data_here(f"hf-disk:{saved}?image=img")  # the folder is the part before '?'
    assert check_device_here("cpu") == "cpu"
    with pytest.raises(ConfigError, match="^node config device = 'tpu'"):
        check_device_here("tpu", "node config device")


def test_a_run_config_copies_and_pickles_with_its_settings():
    """Ray and `copy` build the object before its sections are set: the look-up of a run-wide
    setting must not recurse then."""
    import copy
    import pickle

    config = RunConfig.from_mapping({**default_config(), "lr": 3e-4})
    for twin in (copy.deepcopy(config), pickle.loads(pickle.dumps(config))):
        assert twin == config and twin.training.lr == 3e-4 and twin.seed == config.seed
    with pytest.raises(AttributeError, match="RunConfig has no setting 'no_such'"):
        config.no_such  # noqa: B018
