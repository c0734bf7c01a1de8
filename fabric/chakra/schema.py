"""Chakra execution-trace messages (package ChakraProtoMsg), built at import time from a descriptor written here.

Written from MLCommons Chakra's published schema (`schema/protobuf/et_def.proto`, the version ASTRA-sim reads):
the same package, message, field names and field numbers, so files written with these classes parse with Chakra's
own generated code and the other way round. Only what a decode-step trace uses is declared: the scalar and
int64-list members of AttributeProto's `value` oneof, GlobalMetadata, Node, IOInfo and the NodeType and
CollectiveCommType enums. Fields this subset leaves out (other attribute types, storage info) are skipped by the
parser as unknown fields, as protobuf does for any newer schema. Building the descriptor in Python needs neither
protoc nor generated code in the repository; the dependency is the `protobuf` package only.

The file layout (one file per rank, `<prefix>.<rank>.et`; a GlobalMetadata message, then one Node per message,
each prefixed by its length as a varint) is Chakra's `encodeMessage` / `decodeMessage` framing.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"
CHAKRA_VERSION = "0.0.4"            # GlobalMetadata.version that ASTRA-sim's feeder accepts

NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
              "COMM_RECV_NODE", "COMM_COLL_NODE", "STORAGE_NODE", "BATCH_NODE", "CHECKPOINT_NODE")
COLLECTIVE_TYPES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL",
                    "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER")
(INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE,
 COMM_COLL_NODE) = range(8)

_F = descriptor_pb2.FieldDescriptorProto
# AttributeProto's oneof `value`: (field name, number, protobuf type, message type for lists)
_ATTR_VALUES = (("double_val", 3, _F.TYPE_DOUBLE, None), ("int32_val", 7, _F.TYPE_INT32, None),
                ("int64_val", 9, _F.TYPE_INT64, None), ("int64_list", 10, _F.TYPE_MESSAGE, "Int64List"),
                ("uint32_val", 11, _F.TYPE_UINT32, None), ("uint64_val", 13, _F.TYPE_UINT64, None),
                ("bool_val", 27, _F.TYPE_BOOL, None), ("string_val", 29, _F.TYPE_STRING, None))


def _field(msg, name, number, ftype, type_name=None, repeated=False, oneof=None):
    f = msg.field.add(name=name, number=number, type=ftype,
                      label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if type_name:
        f.type_name = f".{PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="fabric_chakra_et_def.proto", package=PACKAGE, syntax="proto3")
    for name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COLLECTIVE_TYPES)):
        e = fd.enum_type.add(name=name)
        for i, v in enumerate(values):
            e.value.add(name=v, number=i)
    lst = fd.message_type.add(name="Int64List")
    _field(lst, "values", 1, _F.TYPE_INT64, repeated=True)
    attr = fd.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    for name, number, ftype, type_name in _ATTR_VALUES:
        _field(attr, name, number, ftype, type_name, oneof=0)
    meta = fd.message_type.add(name="GlobalMetadata")
    _field(meta, "version", 1, _F.TYPE_STRING)
    _field(meta, "attr", 2, _F.TYPE_MESSAGE, "AttributeProto", repeated=True)
    io = fd.message_type.add(name="IOInfo")
    for i, name in enumerate(("values", "shapes", "types"), 1):
        _field(io, name, i, _F.TYPE_STRING)
    node = fd.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, _F.TYPE_ENUM, "NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, "IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, "IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, "AttributeProto", repeated=True)
    return fd


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())


def _cls(name):
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


Node = _cls("Node")
GlobalMetadata = _cls("GlobalMetadata")
AttributeProto = _cls("AttributeProto")


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def framed(msg) -> bytes:
    """One message as Chakra writes it: its length as a varint, then its bytes."""
    data = msg.SerializeToString()
    return encode_varint(len(data)) + data


def unframe(data: bytes):
    """Yield the byte strings of the length-prefixed messages in `data`; ValueError if it ends inside one."""
    pos, end = 0, len(data)
    while pos < end:
        n = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise ValueError(f"a message length is cut off at byte {pos}")
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + n > end:
            raise ValueError(f"a message of {n} B at byte {pos} runs past the end of the file ({end} B)")
        yield data[pos:pos + n]
        pos += n
