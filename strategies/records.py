"""Wire format of adapter state: ``{"<layer>:<parameter>": ndarray}`` <-> Flower ``ArrayRecord``.

Every array key starts with the index of the selectable layer it belongs to (``"3:encoder.layer.3...
lora_B.weight"``), so the server can aggregate per layer without knowing the model.

A state travels packed: one Flower ``Array`` holding one safetensors buffer (names, shapes and
dtypes in its JSON header, the raw bytes after it; the key order in its metadata), not one
``Array`` per parameter. Flower 1.41 moves every ``Array`` of a message as an object of its own,
so the 134 LoRA matrices of minilm-effnet cost about 300 HTTP requests per hop, most of a deployed
message's overhead (deploy/README.md, "Cost of a message"); packed, a message is a few objects.
An empty state (``strategy = "none"``: heads only) is an empty ``ArrayRecord``: nothing is sent.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord
from safetensors.numpy import load, save

from flower_compat import flower_version

State = dict[str, np.ndarray]
PACKED = "adapters"  # the one Array of a packed record
STYPE = "safetensors"  # its serialisation type (Flower's ``Array.stype``)
_ORDER = "order"  # safetensors metadata: the state's keys in their order (the buffer sorts them)
RUNTIME = "runtime"  # ConfigRecord of an evaluate reply: the ClientApp's "flwr-version"
IDENTITY = "identity"  # ConfigRecord of a query reply: the client's id, "client"
REGISTERED_SITE = "registered-site"  # a query's config: the site the node's key is registered as


def runtime_record() -> ConfigRecord:
    """A ClientApp's word on its runtime, sent with its layer scores: its Flower version, which the
    server holds to its own release (`strategies.validation.check_release`)."""
    return ConfigRecord({"flwr-version": flower_version()})


def layer_index(key: str) -> int:
    """Layer index encoded in an array key; ``ValueError`` if the key has no ``"<int>:"`` prefix."""
    head, sep, _ = key.partition(":")
    if not sep or not head.isdigit():
        raise ValueError(f"array key {key!r} does not start with '<layer index>:'")
    return int(head)


def to_record(state: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Pack a state dict into an ``ArrayRecord`` of one safetensors ``Array`` (keys kept in order,
    shapes and dtypes exact); an empty state gives an empty record."""
    if not state:
        return ArrayRecord()
    arrays = {key: np.require(value, requirements='C') for key, value in state.items()}  # 0-d stays 0-d
    blob = save(arrays, metadata={_ORDER: json.dumps(list(arrays))})
    return ArrayRecord({PACKED: Array(dtype="uint8", shape=(len(blob),), stype=STYPE, data=blob)})


def _packed(record: ArrayRecord) -> tuple[bytes, dict]:
    """The buffer of a record made by `to_record` and its parsed safetensors header."""
    if list(record) != [PACKED] or record[PACKED].stype != STYPE:
        raise ValueError(f"record holds {sorted(record)[:3]}, not one packed {STYPE!r} array {PACKED!r}")
    blob = record[PACKED].data
    size = int.from_bytes(blob[:8], "little")  # safetensors: u64 header length, then the JSON header
    return blob, json.loads(blob[8:8 + size])


def from_record(record: ArrayRecord) -> State:
    """Unpack a record made by `to_record`; ``ValueError`` (or safetensors' error) for any other
    record or a buffer whose bytes do not match its header."""
    if len(record) == 0:
        return {}
    blob, header = _packed(record)
    arrays = load(blob)
    order = json.loads(header.get("__metadata__", {}).get(_ORDER, "null"))
    if not isinstance(order, list) or sorted(order) != sorted(arrays):
        raise ValueError(f"packed record's key order {order!r} does not list its arrays")
    return {key: arrays[key] for key in order}


def npy_bytes(value: np.ndarray) -> int:
    """Size of `value` serialized on its own as ``.npy`` (header + raw bytes), as a Flower ``Array``
    of that one array would carry it (``len(Array(value).data)``)."""
    return _npy_header_bytes(value.dtype, value.shape) + value.nbytes


def _npy_header_bytes(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                  "fortran_order": False, "shape": tuple(shape)})
    return header.tell()


_SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8,
                       "I16": np.int16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
                       "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_}


def record_bytes(record: ArrayRecord) -> int:
    """Adapter payload of a record: the bytes of its arrays, each as its own ``.npy`` (what every
    run has reported as ``bytes-up``/``bytes-down`` since the first; the packed buffer carries the
    same raw bytes with one shared header instead of one per array). 0 for an empty record. Read
    from the safetensors header alone: counting needs no copy of the arrays."""
    if len(record) == 0:
        return 0
    _, header = _packed(record)
    total = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        start, end = info["data_offsets"]
        total += _npy_header_bytes(np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]), info["shape"]) + end - start
    return total


def select_layers(state: Mapping[str, np.ndarray], layers: Iterable[int]) -> State:
    """The entries of ``state`` that belong to the given layers."""
    wanted = set(layers)
    return {key: value for key, value in state.items() if layer_index(key) in wanted}


def natural_key(client: str) -> tuple:
    """Sort key of a client id with its digit runs compared as numbers (``partition-2`` before
    ``partition-10``), so simulated clients keep partition order."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", client))
