#!/usr/bin/env python3
"""TensorBoard event files by an independent writer and reader, for
tests/unit/tensorboard_test.cpp.

Uses Google's protobuf library (Debian's python3-protobuf) with the messages
of tensorflow's event.proto and summary.proto declared here by descriptor
(no protoc, no TensorFlow): the fields TensorBoard reads for scalars and
histograms, with TensorFlow's field numbers. CRC-32C is computed bit by bit,
apart from typeflow's implementation.

  tensorboard_events.py write EVENTS JSON   writes a fixture event file and the values it holds
  tensorboard_events.py read EVENTS         parses an event file, prints its events as JSON

The committed fixture (tensorboard_fixture.tfevents and .json) was made with
`write`; the C++ test reads it without Python.
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool

try:
    from google.protobuf.message_factory import GetMessageClass
except ImportError:  # protobuf < 4.22
    from google.protobuf import message_factory

    def GetMessageClass(descriptor):
        return message_factory.MessageFactory().GetPrototype(descriptor)


F = descriptor_pb2.FieldDescriptorProto


def _message(file, name, fields):
    message = file.message_type.add(name=name)
    for number, field_name, kind, label, type_name in fields:
        field = message.field.add(name=field_name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
    return message


def _classes():
    file = descriptor_pb2.FileDescriptorProto(name="typeflow_test_event.proto", package="tensorflow", syntax="proto3")
    optional, repeated = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    _message(file, "HistogramProto", [
        (1, "min", F.TYPE_DOUBLE, optional, None),
        (2, "max", F.TYPE_DOUBLE, optional, None),
        (3, "num", F.TYPE_DOUBLE, optional, None),
        (4, "sum", F.TYPE_DOUBLE, optional, None),
        (5, "sum_squares", F.TYPE_DOUBLE, optional, None),
        (6, "bucket_limit", F.TYPE_DOUBLE, repeated, None),
        (7, "bucket", F.TYPE_DOUBLE, repeated, None),
    ])
    summary = _message(file, "Summary", [(1, "value", F.TYPE_MESSAGE, repeated, ".tensorflow.Summary.Value")])
    value = summary.nested_type.add(name="Value")
    for number, name, kind, type_name in [
        (1, "tag", F.TYPE_STRING, None),
        (2, "simple_value", F.TYPE_FLOAT, None),
        (5, "histo", F.TYPE_MESSAGE, ".tensorflow.HistogramProto"),
        (7, "node_name", F.TYPE_STRING, None),
    ]:
        field = value.field.add(name=name, number=number, type=kind, label=optional)
        if type_name:
            field.type_name = type_name
    # simple_value and histo are members of the oneof "value" in summary.proto.
    value.oneof_decl.add(name="value")
    for field in value.field:
        if field.name in ("simple_value", "histo"):
            field.oneof_index = 0
    event = _message(file, "Event", [
        (1, "wall_time", F.TYPE_DOUBLE, optional, None),
        (2, "step", F.TYPE_INT64, optional, None),
        (3, "file_version", F.TYPE_STRING, optional, None),
        (4, "graph_def", F.TYPE_BYTES, optional, None),
        (5, "summary", F.TYPE_MESSAGE, optional, ".tensorflow.Summary"),
    ])
    event.oneof_decl.add(name="what")
    for field in event.field:
        if field.name in ("file_version", "graph_def", "summary"):
            field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (GetMessageClass(pool.FindMessageTypeByName("tensorflow.Event")),
            GetMessageClass(pool.FindMessageTypeByName("tensorflow.Summary")))


Event, Summary = _classes()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_record(out, data):
    length = struct.pack("<Q", len(data))
    out.write(length + struct.pack("<I", masked(crc32c(length))) + data + struct.pack("<I", masked(crc32c(data))))


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        if length_crc != masked(crc32c(data[at:at + 8])):
            raise ValueError(f"{path}: the length's CRC is wrong at byte {at}")
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if len(body) != length or body_crc != masked(crc32c(body)):
            raise ValueError(f"{path}: the data's CRC is wrong at byte {at + 12}")
        yield body
        at += 12 + length + 4


def as_json(event):
    out = {"wall_time": event.wall_time, "step": event.step, "file_version": event.file_version, "values": []}
    for value in event.summary.value:
        item = {"tag": value.tag}
        which = value.WhichOneof("value")
        if which == "simple_value":
            item["simple_value"] = value.simple_value
        elif which == "histo":
            h = value.histo
            item["histo"] = {"min": h.min, "max": h.max, "num": h.num, "sum": h.sum, "sum_squares": h.sum_squares,
                             "bucket_limit": list(h.bucket_limit), "bucket": list(h.bucket)}
        out["values"].append(item)
    return out


def write_fixture(events_path, json_path):
    events = []
    first = Event(wall_time=1700000000.25, file_version="brain.Event:2")
    events.append(first)
    for step, (tag, value) in enumerate([("epoch_loss", 2.5), ("epoch_loss", 0.125), ("epoch_accuracy", 0.75)]):
        event = Event(wall_time=1700000001.5 + step, step=step)
        event.summary.value.add(tag=tag, simple_value=value)
        events.append(event)
    # Two values in one event, a negative step (ten varint bytes) and a field
    # typeflow never writes (node_name), which a reader skips.
    event = Event(wall_time=1700000010.0, step=-3)
    event.summary.value.add(tag="batch_loss", simple_value=-1.5, node_name="ignored")
    event.summary.value.add(tag="batch_learning_rate", simple_value=0.001)
    events.append(event)
    event = Event(wall_time=1700000011.0, step=1 << 40)
    histo = event.summary.value.add(tag="layers.1.kernel").histo
    histo.min, histo.max, histo.num, histo.sum, histo.sum_squares = -1.0, 3.0, 4.0, 4.5, 11.25
    histo.bucket_limit.extend([0.0, 1.5, 3.0])
    histo.bucket.extend([1.0, 2.0, 1.0])
    events.append(event)
    with open(events_path, "wb") as out:
        for event in events:
            write_record(out, event.SerializeToString())
    with open(json_path, "w") as out:
        json.dump([as_json(e) for e in events], out, indent=1)
        out.write("\n")


def main(argv):
    if len(argv) == 4 and argv[1] == "write":
        write_fixture(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "read":
        events = []
        for body in read_records(argv[2]):
            event = Event()
            event.ParseFromString(body)
            events.append(as_json(event))
        json.dump(events, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
