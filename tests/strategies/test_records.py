"""The adapter wire format (`strategies.records`): one packed safetensors Array per message, an
exact round trip (keys in order, shapes, dtypes, values), nothing for an empty state, and the
payload size every run reports (`record_bytes`: each array as its own ``.npy``)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

from strategies.records import PACKED, from_record, npy_bytes, record_bytes, to_record


def mixed_state() -> dict[str, np.ndarray]:
    """Keys deliberately not sorted, every dtype a state may hold, 0-d and empty arrays."""
    rng = np.random.default_rng(0)
    return {
        "3:lora_B": rng.standard_normal((8, 384)).astype(np.float32),
        "0:lora_A": rng.standard_normal((384, 8)).astype(np.float32),
        "10:scale": np.array(0.5, dtype=np.float64),
        "2:half": rng.standard_normal((5, 3)).astype(np.float16),
        "1:steps": np.arange(7, dtype=np.int64),
        "4:mask": np.array([True, False, True]),
        "5:empty": np.zeros((0, 4), dtype=np.float32),
        "6:strided": rng.standard_normal((6, 4)).astype(np.float32)[::2, ::-1],  # not contiguous
    }


def test_round_trip_is_exact_in_order_shape_dtype_and_value():
    state = mixed_state()
    back = from_record(to_record(state))
    assert list(back) == list(state)
    for key, value in state.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape, key
        np.testing.assert_array_equal(back[key], value)
        assert back[key].flags.writeable


def test_a_state_travels_as_one_array_and_survives_flowers_serialisation():
    state = mixed_state()
    record = to_record(state)
    assert list(record) == [PACKED]
    proto = recorddict_to_proto(RecordDict({"arrays": record}))
    back = from_record(recorddict_from_proto(proto)["arrays"])
    assert list(back) == list(state)
    assert all(np.array_equal(back[k], v) for k, v in state.items())


def test_an_empty_state_sends_nothing():
    record = to_record({})
    assert len(record) == 0 and record_bytes(record) == 0 and from_record(record) == {}


def test_record_bytes_are_the_arrays_each_as_its_own_npy():
    state = mixed_state()
    expected = sum(len(Array(np.require(v, requirements='C')).data) for v in state.values())
    assert record_bytes(to_record(state)) == expected
    assert all(npy_bytes(np.require(v, requirements='C')) == len(Array(np.require(v, requirements='C')).data)
               for v in state.values())


@pytest.mark.parametrize("record", [
    ArrayRecord({"0:lora_A": Array(np.ones(3, np.float32))}),  # one Array per parameter
    ArrayRecord({PACKED: Array(np.ones(3, np.float32))}),  # the right key, not a safetensors buffer
], ids=["unpacked", "npy-under-the-packed-key"])
def test_any_other_record_is_refused(record):
    with pytest.raises(ValueError):
        from_record(record)
