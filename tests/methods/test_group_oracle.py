"""The group oracle: FedAvg within client groups known in advance, the upper reference
for personalised aggregation. Planted groups: each client must get exactly its group's mean."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from methods import AGGREGATIONS
from methods.group_oracle.server import group_oracle
from settings import ConfigError, RunConfig, default_config
from strategies.aggregation import ClientUpdate
from strategies.aggregation.masked import masked_fedavg


def update(node: int, pid: int, value: float, examples: int, keys=("0:a", "1:b")) -> ClientUpdate:
    return ClientUpdate(node, {k: np.full((2, 3), value, np.float32) for k in keys}, examples,
                        metrics={"partition-id": pid})


def test_each_client_receives_exactly_its_planted_groups_weighted_mean():
    state = {"0:a": np.zeros((2, 3), np.float32), "1:b": np.zeros((2, 3), np.float32),
             "2:c": np.full((2, 3), 7.0, np.float32)}
    updates = [update(10, 0, 1.0, 10), update(11, 1, 3.0, 30),  # group 0: (1·10 + 3·30) / 40 = 2.5
               update(12, 2, -4.0, 5), update(13, 3, -2.0, 15),  # group 1: (−4·5 − 2·15) / 20 = −2.5
               update(14, 4, 100.0, 1, keys=("1:b",))]  # partition 4 -> groups[4 % 4] = group 0
    result = group_oracle(state, updates, groups=[0, 0, 1, 1])
    expected = {10: {"0:a": 2.5, "1:b": (10 + 90 + 100) / 41}, 11: {"0:a": 2.5, "1:b": (10 + 90 + 100) / 41},
                12: {"0:a": -2.5, "1:b": -2.5}, 13: {"0:a": -2.5, "1:b": -2.5}}
    for node, values in expected.items():
        for key, value in values.items():
            np.testing.assert_allclose(result.personal[node][key], value, rtol=1e-6)
        np.testing.assert_array_equal(result.personal[node]["2:c"], 7.0)  # nobody trained it
    np.testing.assert_allclose(result.personal[14]["1:b"], (10 + 90 + 100) / 41, rtol=1e-6)
    for key in ("0:a", "1:b"):  # the shared state is the masked FedAvg of everyone
        np.testing.assert_allclose(result.global_state[key], masked_fedavg(state, updates).global_state[key])
    assert AGGREGATIONS["group-oracle"].server_step() is group_oracle


def test_one_group_is_masked_fedavg_and_bad_groups_are_one_line_errors():
    state = {"0:a": np.zeros((2, 3), np.float32), "1:b": np.zeros((2, 3), np.float32)}
    updates = [update(1, 0, 1.0, 1), update(2, 1, 2.0, 3)]
    result = group_oracle(state, updates, groups=[0])
    fedavg = masked_fedavg(state, updates).global_state
    assert all(np.array_equal(result.personal[n]["0:a"], fedavg["0:a"]) for n in (1, 2))
    with pytest.raises(ValueError, match="node 3 sent no partition id"):
        group_oracle(state, [ClientUpdate(3, {}, 1)], groups=[0])
    with pytest.raises(ConfigError, match="needs client-groups"):
        RunConfig.from_mapping({**default_config(), "aggregation": "group-oracle"})
    with pytest.raises(ConfigError, match="client-groups = '0,x' must list group ids"):
        RunConfig.from_mapping({**default_config(), "client-groups": "0,x"})


def test_the_planted_conflict_rotates_each_question_types_answers_among_themselves():
    from tasks.data import answers_by_type, load_partition
    from tasks.data.conflict import rotate_answers, rotation

    part = load_partition("synthetic", 0, 2, "iid", seed=0)
    answers = answers_by_type("synthetic", 0)
    assert answers == {"color": list(range(3, 11)), "shape": [0, 1, 2], "yes/no": [11, 12]}
    mapping = rotation(part, answers)
    assert sorted(mapping) == list(range(len(part.labels)))  # a permutation of the vocabulary
    qtype_of = {s.target: s.qtype for s in part.train}
    assert all(qtype_of[int(mapping[a])] == q for a, q in qtype_of.items())  # within its type
    assert all(mapping[a] != a for a in qtype_of)  # every answer used moves
    rotated = rotate_answers(part, answers)
    assert [s.target for s in rotated.train] == [int(mapping[s.target]) for s in part.train]
    assert [s.question for s in rotated.test] == [s.question for s in part.test]
    # a client whose samples lack an answer (here: every sample of one colour dropped) is rotated
    # as every other client of its group: the data set's answers decide, not its own
    lacking = replace(part, train=[s for s in part.train if s.target != 4],
                      test=[s for s in part.test if s.target != 4])
    np.testing.assert_array_equal(rotation(lacking, answers), mapping)
    with pytest.raises(ConfigError, match="needs client-groups"):
        RunConfig.from_mapping({**default_config(), "group-conflict": "answers"})


def test_each_partition_is_seen_with_its_own_clients_conflict_also_for_others():
    """'Others' evaluates on the other partitions as their clients see them: an odd group's
    partition with rotated answers, an even group's as it is, whoever asks."""
    from client_app.runtime import client_partition
    from tasks.data import answers_by_type, load_partition
    from tasks.data.conflict import rotate_answers

    config = RunConfig.from_mapping({**default_config(), "dataset": "synthetic", "partitioner": "iid",
                                     "client-groups": "0,1", "group-conflict": "answers"})
    for pid in range(4):
        plain = load_partition("synthetic", pid, 4, "iid", seed=0, max_test=200)
        seen = client_partition(config, "synthetic", pid, 4)
        expected = rotate_answers(plain, answers_by_type("synthetic", 0)) if pid % 2 else plain
        assert [s.target for s in seen.test] == [s.target for s in expected.test]
        assert pid % 2 == 0 or [s.target for s in seen.test] != [s.target for s in plain.test]
