"""experiments.sensitivity: the layer masks of its modes, and one screening run end to end."""

import json

import numpy as np
import pytest

from experiments import sensitivity


def test_modes_train_no_layer_the_last_k_or_every_layer():
    assert not sensitivity.layer_mask("none", 5, 2).any()
    np.testing.assert_array_equal(sensitivity.layer_mask("last", 5, 2), [0, 0, 0, 1, 1])
    assert sensitivity.layer_mask("all", 5, 2).all()
    with pytest.raises(ValueError, match="unknown mode 'first'"):
        sensitivity.layer_mask("first", 5, 2)


def test_gaps_are_all_minus_each_other_mode_in_points():
    results = [{"mode": "none", "accuracy": 0.5}, {"mode": "last", "accuracy": 0.6},
               {"mode": "all", "accuracy": 0.75}]
    assert sensitivity.gaps(results) == {"all-none": 25.0, "all-last": 15.0}


def test_screening_prints_a_line_per_mode_and_the_gaps(capsys):
    sensitivity.main(["--model", "tiny-vilt", "--dataset", "synthetic", "--qtype", "yes/no", "--steps", "2",
                      "--batch-size", "4", "--max-train", "16", "--max-test", "12"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("mode") for line in lines] == ["none", "last", "all", None]
    for line in lines[:3]:
        assert line["n_train"] <= 16 and line["n_test"] <= 12 and line["qtype"] == "yes/no"
        assert 0 <= line["accuracy"] <= 1 and 0 < line["majority"] <= 1
    acc = {line["mode"]: line["accuracy"] for line in lines[:3]}
    assert lines[3]["gaps"] == pytest.approx({"all-none": 100 * (acc["all"] - acc["none"]),
                                              "all-last": 100 * (acc["all"] - acc["last"])}, abs=0.01)
