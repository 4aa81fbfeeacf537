"""Just enough of the ONNX file format to read a model's graph inputs (the sim's atc checks them, the
agent shows them as an ONNX model's facts) and to write a tiny model.

Standard library only, like the rest of the sim's tools: an agent runs them with its own interpreter,
and the `onnx` package (protobuf plus a C++ extension) is far heavier than the few fields ATC checks
before it compiles. The tests read models made by the real `onnx` helper API with this reader and check
the writer's output with onnx.checker, so the two stay honest to the format.

Field numbers are those of onnx.proto: ModelProto{1 ir_version, 7 graph, 8 opset_import},
GraphProto{1 node, 2 name, 5 initializer, 11 input, 12 output}, NodeProto{1 input, 2 output, 3 name,
4 op_type, 5 attribute}, ValueInfoProto{1 name, 2 type}, TypeProto{1 tensor_type{1 elem_type, 2 shape}},
TensorShapeProto{1 dim{1 dim_value, 2 dim_param}}, TensorProto{1 dims, 2 data_type, 8 name, 9 raw_data}.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
FLOAT = 1  # TensorProto.DataType.FLOAT


class NotOnnxError(ValueError):
    """The bytes are not an ONNX model this reader understands; the message says why."""


@dataclass(frozen=True)
class GraphInput:
    name: str
    dims: tuple[int | str, ...]  # a number, or the symbolic name (or "?") of a dynamic dimension


@dataclass(frozen=True)
class OnnxModel:
    ir_version: int
    opset: int
    inputs: tuple[GraphInput, ...]  # the graph's real inputs, initializers (weights) left out
    outputs: tuple[str, ...]
    op_types: tuple[str, ...]


# --- reading ---------------------------------------------------------------------------------------


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise NotOnnxError("truncated or malformed varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one protobuf message; varints as ints, everything else as bytes."""
    fields: list[tuple[int, int | bytes]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise NotOnnxError("field number 0")
        value: int | bytes
        if wire == VARINT:
            value, position = _varint(data, position)
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            value, position = data[position : position + size], position + size
        elif wire == LENGTH_DELIMITED:
            size, position = _varint(data, position)
            value, position = data[position : position + size], position + size
        else:
            raise NotOnnxError(f"unsupported wire type {wire}")
        if position > len(data):
            raise NotOnnxError("message ends inside a field")
        fields.append((number, value))
    return fields


def _all(fields, number: int) -> list:
    return [value for field, value in fields if field == number]


def _first(fields, number: int, default=None):
    found = _all(fields, number)
    return found[-1] if found else default


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise NotOnnxError("a name is not UTF-8") from None


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _graph_input(message: bytes) -> GraphInput:
    fields = _fields(message)
    name = _text(_first(fields, 1, b""))
    tensor_type = _fields(_first(_fields(_first(fields, 2, b"")), 1, b""))
    dims = []
    for dim in _all(_fields(_first(tensor_type, 2, b"")), 1):
        dim_fields = _fields(dim)
        value = _first(dim_fields, 1)
        dims.append(_signed(value) if value is not None else _text(_first(dim_fields, 2, b"?")) or "?")
    return GraphInput(name, tuple(dims))


def parse_model(data: bytes) -> OnnxModel:
    """The facts ATC checks in a serialized ModelProto; NotOnnxError when it is not one."""
    fields = _fields(data)
    ir_version = _first(fields, 1)
    graph = _first(fields, 7)
    if not isinstance(ir_version, int) or ir_version <= 0 or not isinstance(graph, bytes):
        raise NotOnnxError("no ir_version or no graph: not an ONNX ModelProto")
    opsets = [_fields(opset) for opset in _all(fields, 8) if isinstance(opset, bytes)]
    default_domain = [o for o in opsets if _first(o, 1, b"") in (b"", b"ai.onnx")]
    opset = _first(default_domain[0], 2, 0) if default_domain else 0
    graph_fields = _fields(graph)
    initializers = {_text(_first(_fields(t), 8, b"")) for t in _all(graph_fields, 5)}
    inputs = tuple(
        graph_input
        for graph_input in map(_graph_input, _all(graph_fields, 11))
        if graph_input.name not in initializers
    )
    outputs = tuple(_text(_first(_fields(o), 1, b"")) for o in _all(graph_fields, 12))
    op_types = tuple(_text(_first(_fields(node), 4, b"")) for node in _all(graph_fields, 1))
    if not op_types:
        raise NotOnnxError("the graph has no nodes")
    return OnnxModel(ir_version, opset, inputs, outputs, op_types)


def read_model(path: str | Path) -> OnnxModel:
    return parse_model(Path(path).read_bytes())


# --- writing ---------------------------------------------------------------------------------------


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _key(number, VARINT) + _encode_varint(value)


def _bytes(number: int, value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return _key(number, LENGTH_DELIMITED) + _encode_varint(len(raw)) + raw


def _value_info(name: str, dims: tuple[int, ...]) -> bytes:
    shape = b"".join(_bytes(1, _int(1, dim)) for dim in dims)
    tensor_type = _int(1, FLOAT) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def _float_tensor(name: str, dims: tuple[int, ...], values: list[float]) -> bytes:
    raw = struct.pack(f"<{len(values)}f", *values)
    return b"".join(_int(1, dim) for dim in dims) + _int(2, FLOAT) + _bytes(8, name) + _bytes(9, raw)


def _node(op_type: str, inputs: tuple[str, ...], outputs: tuple[str, ...], name: str) -> bytes:
    fields = [_bytes(1, value) for value in inputs] + [_bytes(2, value) for value in outputs]
    return b"".join(fields) + _bytes(3, name) + _bytes(4, op_type)


def tiny_vision_model(input_name: str = "images", size: int = 8, channels: int = 4) -> bytes:
    """A valid ONNX model: 1×3×size×size image → 1×1 conv → Relu → global average pool (opset 13)."""
    weights = [((o * 3 + i) % 7 - 3) / 10 for o in range(channels) for i in range(3)]
    graph = (
        _bytes(1, _node("Conv", (input_name, "conv.weight"), ("conv_out",), "conv"))
        + _bytes(1, _node("Relu", ("conv_out",), ("relu_out",), "relu"))
        + _bytes(1, _node("GlobalAveragePool", ("relu_out",), ("features",), "pool"))
        + _bytes(2, "tiny_vision")
        + _bytes(5, _float_tensor("conv.weight", (channels, 3, 1, 1), weights))
        + _bytes(11, _value_info(input_name, (1, 3, size, size)))
        + _bytes(12, _value_info("features", (1, channels, 1, 1)))
    )
    opset = _bytes(1, "") + _int(2, 13)
    return _int(1, 8) + _bytes(2, "ascend-panel-sim") + _bytes(7, graph) + _bytes(8, opset)


def write_tiny_vision_model(path: str | Path, input_name: str = "images") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tiny_vision_model(input_name))
    return path


def onnx_facts(path: str | Path) -> dict:
    """What a model page shows of an ONNX file: opset, IR version, graph inputs and outputs, operators;
    {"unreadable": reason} when this reader cannot parse it."""
    try:
        model = read_model(path)
    except (OSError, NotOnnxError) as error:
        return {"unreadable": str(error)}
    return {
        "file_bytes": Path(path).stat().st_size,
        "ir_version": model.ir_version,
        "opset": model.opset,
        "inputs": [{"name": i.name, "dims": list(i.dims)} for i in model.inputs],
        "outputs": list(model.outputs),
        "operators": len(model.op_types),
    }
