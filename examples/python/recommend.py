#!/usr/bin/env python3
"""Ask autoscaled for an HPA decision from Python (grpcio).

The stubs are generated at run time from proto/ with grpcio-tools into a temporary directory,
so nothing generated is committed. Needs: pip install grpcio grpcio-tools grpcio-status.

    python examples/python/recommend.py 127.0.0.1:50051 [--target-key nomad/prod/web]

Three pods, each requesting 1 CPU and using 900m, against a 50% utilization target: the HPA
wants ceil(3 * 90/50) = 6 replicas.
"""
import argparse
import datetime as dt
import importlib
import pathlib
import sys
import tempfile

import grpc
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from grpc_tools import protoc

REPO = pathlib.Path(__file__).resolve().parents[2]
PROTOS = ["autoscaled/v1/horizontal.proto", "autoscaled/v1/vertical.proto"]


def load_stubs(out_dir):
    """Compiles proto/ into out_dir and imports the horizontal messages and stub."""
    wkt = pathlib.Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    rc = protoc.main(["grpc_tools.protoc", f"-I{REPO / 'proto'}", f"-I{wkt}",
                      f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", *PROTOS])
    if rc != 0:
        sys.exit(f"protoc failed ({rc})")
    sys.path.insert(0, str(out_dir))
    return (importlib.import_module("autoscaled.v1.horizontal_pb2"),
            importlib.import_module("autoscaled.v1.horizontal_pb2_grpc"))


def ts(when):
    t = timestamp_pb2.Timestamp()
    t.FromDatetime(when)
    return t


def build_request(pb, target_key, current_replicas):
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    started = now - dt.timedelta(hours=1)  # long past the 5 min CPU initialization period
    pods = []
    for i in range(current_replicas):
        pods.append(pb.PodSample(
            name=f"web-{i}",
            phase=pb.POD_PHASE_RUNNING,
            ready=True,
            start_time=ts(started),
            ready_transition_time=ts(started + dt.timedelta(seconds=20)),
            requests_milli={"cpu": 1000},
            metrics={"cpu": pb.MetricSample(value_milli=900, timestamp=ts(now))},
        ))
    return pb.RecommendRequest(
        target_key=target_key,
        current_replicas=current_replicas,
        spec=pb.HorizontalSpec(
            min_replicas=1,
            max_replicas=10,
            metrics=[pb.MetricSpec(
                type=pb.METRIC_SOURCE_TYPE_RESOURCE,
                name="cpu",
                target=pb.MetricTarget(type=pb.METRIC_TARGET_TYPE_UTILIZATION,
                                       average_utilization=50),
            )],
        ),
        pods=pods,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("addr", help="host:port of autoscaled")
    ap.add_argument("--target-key", default="python-example/prod/web")
    ap.add_argument("--current-replicas", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="autoscaled-py-") as gen:
        pb, pb_grpc = load_stubs(gen)
        request = build_request(pb, args.target_key, args.current_replicas)
        with grpc.insecure_channel(args.addr) as channel:
            stub = pb_grpc.HorizontalAutoscalerStub(channel)
            try:
                resp = stub.Recommend(request, timeout=10)
            except grpc.RpcError as err:
                print(f"error: {err.code().name}: {err.details()}")
                status = rpc_status.from_call(err)
                for detail in status.details if status else []:
                    if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                        bad = error_details_pb2.BadRequest()
                        detail.Unpack(bad)
                        for v in bad.field_violations:
                            print(f"invalid field {v.field}: {v.description}")
                return 2

    print(f"target {args.target_key}: {args.current_replicas} -> {resp.desired_replicas} replicas"
          f" (path {resp.explanation.path}, recorded {resp.recorded})")
    for c in resp.conditions:
        print(f"  {c.type}={c.status} {c.reason}: {c.message}")
    for m in resp.metrics:
        if m.HasField("current_average_utilization"):
            print(f"  metric {m.name}: {m.current_average_utilization}% proposes {m.proposed_replicas}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
